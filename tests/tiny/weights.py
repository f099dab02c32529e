"""The tiny models' tensors, per architecture (numpy shapes are ggml's ne reversed: a ggml
{in, out} matrix is (out, in) here).

Every architecture draws from one generator seeded by ``spec.seed`` in the same order: the
token embeddings, the layers, the output projection; so equal seeds and shapes give equal
weights, and a qwen35 trunk is the same with or without its MTP block (drawn apart, after).
"""

from __future__ import annotations

import numpy as np

from .spec import TinySpec

# Not perturbed by ``noise``: an SSM decay must stay negative (a positive A diverges).
_NO_NOISE = ("ssm_a",)
# Kept F32 in an F16 model: ggml's ssm_conv kernel, the SSM's A and D, its gated norm.
_F32_ONLY = ("ssm_conv1d.weight", "shortconv.conv.weight", "ssm_a", "ssm_d", "ssm_norm.weight")


def lin(rng, out_dim: int, in_dim: int, gain: float = 1.0) -> np.ndarray:
    """A random (out_dim, in_dim) matrix whose products keep the input's scale (times ``gain``)."""
    return (rng.standard_normal((out_dim, in_dim)) * gain / np.sqrt(in_dim)).astype(np.float32)


def _ones(*shape: int) -> np.ndarray:
    return np.ones(shape, dtype=np.float32)


def _llama_layer(rng, s: TinySpec, i: int, p: str) -> dict[str, np.ndarray]:
    e = s.n_embd
    kv = e // s.n_head * s.n_head_kv
    w = {p + "attn_norm.weight": _ones(e)}
    w[p + "attn_q.weight"] = lin(rng, e, e)
    w[p + "attn_k.weight"] = lin(rng, kv, e)
    w[p + "attn_v.weight"] = lin(rng, kv, e)
    w[p + "attn_output.weight"] = lin(rng, e, e, s.layer_gain)
    w[p + "ffn_norm.weight"] = _ones(e)
    w.update(_swiglu(rng, s, p))
    return w


def _swiglu(rng, s: TinySpec, p: str) -> dict[str, np.ndarray]:
    e, f = s.n_embd, s.n_ff
    return {p + "ffn_gate.weight": lin(rng, f, e), p + "ffn_up.weight": lin(rng, f, e),
            p + "ffn_down.weight": lin(rng, e, f, s.layer_gain)}


def _dt_bias(rng, n: int) -> np.ndarray:
    """softplus(bias) = dt in [1e-3, 1e-1] at init, as in the Mamba reference code."""
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), n))
    return (dt + np.log(-np.expm1(-dt))).astype(np.float32)


def _mamba_layer(rng, s: TinySpec, i: int, p: str) -> dict[str, np.ndarray]:
    e, d, n, k = s.n_embd, s.d_inner, s.d_state, s.d_conv
    r = s.dt_rank or -(-e // 16)
    dt_bias = _dt_bias(rng, d)
    return {
        p + "attn_norm.weight": _ones(e),
        p + "ssm_in.weight": lin(rng, 2 * d, e),
        p + "ssm_conv1d.weight": lin(rng, d, k),
        p + "ssm_conv1d.bias": np.zeros(d, dtype=np.float32),
        p + "ssm_x.weight": lin(rng, r + 2 * n, d),
        p + "ssm_dt.weight": lin(rng, d, r, 0.5),
        p + "ssm_dt.bias": dt_bias,
        # A = -exp(A_log) with the S4D-real initialisation A_log = log(1..d_state)
        p + "ssm_a": -np.tile(np.arange(1, n + 1, dtype=np.float32), (d, 1)),
        p + "ssm_d": _ones(d),
        p + "ssm_out.weight": lin(rng, e, d, s.layer_gain),
    }


def _mamba2_layer(rng, s: TinySpec, i: int, p: str) -> dict[str, np.ndarray]:
    e, d, n, k, g = s.n_embd, s.d_inner, s.d_state, s.d_conv, s.n_group
    h = s.dt_rank or 4
    conv_dim = d + 2 * g * n
    dt_bias = _dt_bias(rng, h)
    return {
        p + "attn_norm.weight": _ones(e),
        p + "ssm_in.weight": lin(rng, 2 * d + 2 * g * n + h, e),
        p + "ssm_conv1d.weight": lin(rng, conv_dim, k),
        p + "ssm_conv1d.bias": np.zeros(conv_dim, dtype=np.float32),
        p + "ssm_dt.bias": dt_bias,
        p + "ssm_a": -np.arange(1, h + 1, dtype=np.float32).reshape(h, 1),
        p + "ssm_d": _ones(h, 1),
        p + "ssm_norm.weight": _ones(g, d // g),
        p + "ssm_out.weight": lin(rng, e, d, s.layer_gain),
    }


def _lfm2_layer(rng, s: TinySpec, i: int, p: str) -> dict[str, np.ndarray]:
    e = s.n_embd
    hd = e // s.n_head
    w = {p + "attn_norm.weight": _ones(e), p + "ffn_norm.weight": _ones(e)}
    w.update(_swiglu(rng, s, p))
    if i in s.attn_layers:
        kv = hd * s.n_head_kv
        w.update({
            p + "attn_q_norm.weight": _ones(hd),
            p + "attn_k_norm.weight": _ones(hd),
            p + "attn_q.weight": lin(rng, e, e),
            p + "attn_k.weight": lin(rng, kv, e),
            p + "attn_v.weight": lin(rng, kv, e),
            p + "attn_output.weight": lin(rng, e, e, s.layer_gain),
        })
    else:
        w.update({
            p + "shortconv.conv.weight": lin(rng, e, s.l_cache),
            p + "shortconv.in_proj.weight": lin(rng, 3 * e, e),
            p + "shortconv.out_proj.weight": lin(rng, e, e, s.layer_gain),
        })
    return w


def _gated_attention(rng, s: TinySpec, p: str) -> dict[str, np.ndarray]:
    e, hd = s.n_embd, s.head_dim
    q, kv = s.n_head * hd, s.n_head_kv * hd
    return {
        p + "attn_q.weight": lin(rng, 2 * q, e),        # query and its output gate
        p + "attn_k.weight": lin(rng, kv, e),
        p + "attn_v.weight": lin(rng, kv, e),
        p + "attn_output.weight": lin(rng, e, q, s.layer_gain),
        p + "attn_q_norm.weight": _ones(hd),
        p + "attn_k_norm.weight": _ones(hd),
    }


def _delta_net(rng, s: TinySpec, p: str) -> dict[str, np.ndarray]:
    e = s.n_embd
    k_dim, v_dim = s.d_state * s.n_k_heads, s.d_state * s.n_v_heads
    conv = 2 * k_dim + v_dim
    return {
        p + "attn_qkv.weight": lin(rng, conv, e),
        p + "attn_gate.weight": lin(rng, v_dim, e),
        p + "ssm_conv1d.weight": lin(rng, conv, s.d_conv),
        p + "ssm_dt.bias": rng.uniform(-1.0, 0.0, s.n_v_heads).astype(np.float32),
        # -exp(A_log): a negative decay rate per value head
        p + "ssm_a": -rng.uniform(0.5, 2.0, s.n_v_heads).astype(np.float32),
        p + "ssm_beta.weight": lin(rng, s.n_v_heads, e),
        p + "ssm_alpha.weight": lin(rng, s.n_v_heads, e),
        p + "ssm_norm.weight": _ones(s.d_state),
        p + "ssm_out.weight": lin(rng, e, v_dim, s.layer_gain),
    }


def _qwen35_block(rng, s: TinySpec, p: str, recurrent: bool) -> dict[str, np.ndarray]:
    w = {p + "attn_norm.weight": _ones(s.n_embd), p + "post_attention_norm.weight": _ones(s.n_embd)}
    w.update(_delta_net(rng, s, p) if recurrent else _gated_attention(rng, s, p))
    w.update(_swiglu(rng, s, p))
    return w


def _qwen35_layer(rng, s: TinySpec, i: int, p: str) -> dict[str, np.ndarray]:
    return _qwen35_block(rng, s, p, s.is_recurrent(i))


def _mtp_block(s: TinySpec) -> dict[str, np.ndarray]:
    """The nextn block: a full-attention decoder block fed by eh_proj([enorm(embedding of
    the token), hnorm(target's hidden state before it)])."""
    rng = np.random.default_rng(s.seed + 7_777)
    e = s.n_embd
    p = f"blk.{s.n_layer}."
    w = _qwen35_block(rng, s, p, recurrent=False)
    eh = np.zeros((e, 2 * e), dtype=np.float32)
    eh[:, :e] = np.eye(e, dtype=np.float32)           # pass the token embedding through
    eh[:, e:] = lin(rng, e, e, 0.1)                   # and a little of the hidden state
    w[p + "nextn.eh_proj.weight"] = eh
    for name in ("enorm", "hnorm", "shared_head_norm"):
        w[p + f"nextn.{name}.weight"] = _ones(e)
    if s.mtp_noise:
        add_weight_noise(w, s.mtp_noise, s.noise_seed + 99)
    return w


_LAYERS = {"llama": _llama_layer, "mamba": _mamba_layer, "mamba2": _mamba2_layer, "lfm2": _lfm2_layer,
           "qwen35": _qwen35_layer}


def output_norm_name(s: TinySpec) -> str:
    """LFM2 names its final norm token_embd_norm (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2)."""
    return "token_embd_norm.weight" if s.arch == "lfm2" else "output_norm.weight"


def model_weights(s: TinySpec, n_vocab: int) -> dict[str, np.ndarray]:
    """Every tensor of the whole model (the trunk, then any MTP block), by GGUF name.

    Args:
        s: what to generate.
        n_vocab: the vocabulary's size, ``extra_tokens`` included.

    Returns:
        name -> float32 array, in the order they go into the file.
    """
    base = n_vocab - s.extra_tokens
    rng = np.random.default_rng(s.seed)
    e = s.n_embd
    w: dict[str, np.ndarray] = {"token_embd.weight": rng.standard_normal((base, e)).astype(np.float32)}
    for i in range(s.n_layer):
        w.update(_LAYERS[s.arch](rng, s, i, f"blk.{i}."))
    w[output_norm_name(s)] = _ones(e)
    w["output.weight"] = lin(rng, base, e, gain=s.scale * 4.0)
    w["output.weight"][0, :] = 0.0   # token 0 (<|endoftext|>) never wins
    if s.extra_tokens:
        # Extra tokens (like the padding ids of a larger vocabulary) get rows of their own,
        # drawn apart, so the model agrees with its base on every shared id.
        extra = np.random.default_rng(50_000 + s.seed)
        x = s.extra_tokens
        w["token_embd.weight"] = np.concatenate(
            [w["token_embd.weight"], extra.standard_normal((x, e)).astype(np.float32)])
        extra_out = (extra.standard_normal((x, e)) * s.scale * 4.0 / np.sqrt(e)).astype(np.float32)
        w["output.weight"] = np.concatenate([w["output.weight"], extra_out])
    if s.noise:
        add_weight_noise(w, s.noise, s.noise_seed, skip=lambda name, v: name.endswith(_NO_NOISE) or not v.std() > 0)
    if s.bigram_seed:
        w["output.weight"] = bigram_output(w["token_embd.weight"], s.bigram_seed, s.scale, s.bigram_swaps)
    if s.blind_output:
        w[output_norm_name(s)] = np.zeros(e, dtype=np.float32)
    if s.mtp:
        w.update(_mtp_block(s))
    return w


def stored(name: str, arr: np.ndarray, f16: bool) -> np.ndarray:
    """The array as the file stores it: the matrices F16 in an F16 model, but for _F32_ONLY."""
    if f16 and arr.ndim == 2 and not name.endswith(_F32_ONLY):
        return arr.astype(np.float16)
    return arr


def add_weight_noise(w: dict, noise: float, seed: int, skip=lambda name, v: False) -> None:
    """Perturb every 2-D tensor (a "draft" of the same model): ``noise`` times its std."""
    rng = np.random.default_rng(10_000 + seed)
    for k, v in w.items():
        if v.ndim == 2 and not skip(k, v):
            w[k] = (v + rng.standard_normal(v.shape).astype(np.float32) * noise * v.std()).astype(np.float32)


def bigram_sigma(seed: int, n_vocab: int) -> np.ndarray:
    """The permutation a ``bigram_seed`` model follows: it predicts sigma[last token]."""
    return np.random.default_rng(seed).permutation(n_vocab)


def answer_stretch_swaps(answer: list[int], stretch: int) -> tuple[int, ...]:
    """``bigram_swaps`` for a draft of a bigram target that is wrong on every other ``stretch``
    tokens of ``answer``: easy and hard stretches in turn, the first one easy.

    Args:
        answer: the prompt's last token, then the target's own greedy answer after it (taken
            from a run, so every turn the target makes off its permutation counts).
        stretch: tokens per stretch.

    Returns:
        the tokens after which the draft is wrong, in pairs (t, u): after t it predicts what
        follows u. A token that also precedes an easy position, token 0, and an odd one out
        are left alone, so a stretch can hold a few right guesses.
    """
    before = answer[:-1]
    easy = {t for i, t in enumerate(before) if (i // stretch) % 2 == 0}
    hard = list(dict.fromkeys(t for i, t in enumerate(before) if (i // stretch) % 2 == 1 and t not in easy and t))
    return tuple(hard[: len(hard) // 2 * 2])


def bigram_output(emb: np.ndarray, seed: int, scale: float, swaps: tuple[int, ...] = ()) -> np.ndarray:
    """An output matrix whose row sigma(t) is token t's embedding: with a quiet residual
    stream the logits peak at sigma(last token), sigma the permutation ``seed`` draws.
    ``swaps`` (t, u, ...) pairs tokens whose predictions trade places: after t, sigma(u)."""
    n_vocab, e = emb.shape
    out = np.zeros((n_vocab, e), dtype=np.float32)
    sigma = bigram_sigma(seed, n_vocab).copy()
    for t, u in zip(swaps[0::2], swaps[1::2]):
        sigma[t], sigma[u] = sigma[u], sigma[t]
    out[sigma] = emb * (scale * 4.0 / np.sqrt(e))
    out[0, :] = 0.0
    return out
