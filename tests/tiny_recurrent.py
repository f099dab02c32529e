"""Tiny recurrent (Mamba) and hybrid (LFM2) GGUF models generated at test time.

The companions of :mod:`tiny_gguf` for the models whose memory llama.cpp cannot cut at an
arbitrary position:

* ``mamba``: a pure state-space model (``llama_model_is_recurrent`` is true). Every layer is
  a Mamba-1 block; the whole sequence lives in a fixed-size conv + SSM state.
* ``lfm2``: a hybrid (``llama_model_is_hybrid`` is true). LiquidAI's LFM2: gated short
  convolution layers (recurrent conv state) interleaved with grouped-query attention layers
  (a KV cache), each followed by a SwiGLU feed-forward block. It is the simplest hybrid
  llama.cpp runs, and one of the few whose context also supports ``n_rs_seq`` rollback
  snapshots (``llm_arch_supports_rs_rollback``).
* ``mamba2``: a pure Mamba-2 model (multi-head SSM with groups and a gated RMS norm), for
  completeness: it is the recurrent block of nemotron_h, granitehybrid and falcon-h1.

They share the byte-level BPE vocabulary of :mod:`tiny_gguf` (same tokens, merges, special
tokens and chat template), so any of them pairs with a tiny llama model as target or draft.
Like ``TinySpec``, ``noise`` perturbs every matrix by relative Gaussian noise (a draft that
agrees only partly with its target) and ``bigram_seed`` makes a model predict sigma(last
token) for a fixed permutation sigma, which agrees with ``TinySpec(bigram_seed=...)`` of the
same seed whatever the architecture (use a small ``layer_gain`` so the residual stream stays
close to the last token's embedding).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import gguf
import numpy as np
from tiny_gguf import CHATML, SPECIALS, TinySpec, add_weight_noise, bigram_output, bpe_vocab, write_tiny_model

ARCHS = ("mamba", "mamba2", "lfm2")


@dataclass(frozen=True)
class RecurrentSpec:
    """What to generate. Equal ``seed``, arch and shape give equal base weights."""

    arch: str = "mamba"           # "mamba", "mamba2" or "lfm2"
    n_embd: int = 64
    n_layer: int = 2
    n_ctx_train: int = 2048
    # Mamba / Mamba-2 blocks (d_inner is always 2 * n_embd)
    d_state: int = 16
    d_conv: int = 4
    dt_rank: int = 0              # mamba: 0 means ceil(n_embd / 16); mamba2: the head count (0: 4)
    n_group: int = 1              # mamba2 only
    # LFM2 (hybrid): which layers are attention layers; the others are short convolutions
    attn_layers: tuple[int, ...] = (1,)
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    l_cache: int = 3              # short-convolution kernel length (the conv state keeps l_cache - 1)
    # shared with TinySpec
    seed: int = 0
    scale: float = 1.0            # gain of the output projection (higher: peakier logits)
    noise: float = 0.0            # relative Gaussian noise added to every matrix
    noise_seed: int = 1
    n_merges: int = 200
    eos_id: int = 2
    bos_id: int = 1
    add_bos: bool = False
    bigram_seed: int = 0          # nonzero: predict sigma(last token), as TinySpec(bigram_seed=...)
    layer_gain: float = 1.0       # scales what each block adds to the residual stream
    f16: bool = False
    name: str = "tiny-recurrent"

    def with_(self, **kw) -> RecurrentSpec:
        return replace(self, **kw)

    @property
    def hybrid(self) -> bool:
        return self.arch == "lfm2"

    @property
    def d_inner(self) -> int:
        return 2 * self.n_embd


def mamba_spec(**kw) -> RecurrentSpec:
    return RecurrentSpec(arch="mamba", name="tiny-mamba", **kw)


def mamba2_spec(**kw) -> RecurrentSpec:
    return RecurrentSpec(arch="mamba2", name="tiny-mamba2", **kw)


def hybrid_spec(**kw) -> RecurrentSpec:
    return RecurrentSpec(arch="lfm2", name="tiny-lfm2", **kw)


# ---------------------------------------------------------------------------------------
# Weights (numpy shapes are ggml's ne reversed: a ggml {in, out} matrix is (out, in) here)


def _lin(rng, out_dim: int, in_dim: int, gain: float = 1.0) -> np.ndarray:
    return (rng.standard_normal((out_dim, in_dim)) * gain / np.sqrt(in_dim)).astype(np.float32)


def _mamba_layer(rng, spec: RecurrentSpec, p: str) -> dict[str, np.ndarray]:
    e, d, s, k = spec.n_embd, spec.d_inner, spec.d_state, spec.d_conv
    r = spec.dt_rank or -(-e // 16)
    # dt = softplus(W_dt x + b) lands in [1e-3, 1e-1] at init, as in the Mamba reference code
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), d))
    return {
        p + "attn_norm.weight": np.ones(e, dtype=np.float32),
        p + "ssm_in.weight": _lin(rng, 2 * d, e),
        p + "ssm_conv1d.weight": _lin(rng, d, k),
        p + "ssm_conv1d.bias": np.zeros(d, dtype=np.float32),
        p + "ssm_x.weight": _lin(rng, r + 2 * s, d),
        p + "ssm_dt.weight": _lin(rng, d, r, 0.5),
        p + "ssm_dt.bias": (dt + np.log(-np.expm1(-dt))).astype(np.float32),
        # A = -exp(A_log) with the S4D-real initialisation A_log = log(1..d_state)
        p + "ssm_a": -np.tile(np.arange(1, s + 1, dtype=np.float32), (d, 1)),
        p + "ssm_d": np.ones(d, dtype=np.float32),
        p + "ssm_out.weight": _lin(rng, e, d, spec.layer_gain),
    }


def _mamba2_layer(rng, spec: RecurrentSpec, p: str) -> dict[str, np.ndarray]:
    e, d, s, k, g = spec.n_embd, spec.d_inner, spec.d_state, spec.d_conv, spec.n_group
    h = spec.dt_rank or 4
    conv_dim = d + 2 * g * s
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), h))
    return {
        p + "attn_norm.weight": np.ones(e, dtype=np.float32),
        p + "ssm_in.weight": _lin(rng, 2 * d + 2 * g * s + h, e),
        p + "ssm_conv1d.weight": _lin(rng, conv_dim, k),
        p + "ssm_conv1d.bias": np.zeros(conv_dim, dtype=np.float32),
        p + "ssm_dt.bias": (dt + np.log(-np.expm1(-dt))).astype(np.float32),
        p + "ssm_a": -np.arange(1, h + 1, dtype=np.float32).reshape(h, 1),
        p + "ssm_d": np.ones((h, 1), dtype=np.float32),
        p + "ssm_norm.weight": np.ones((g, d // g), dtype=np.float32),
        p + "ssm_out.weight": _lin(rng, e, d, spec.layer_gain),
    }


def _lfm2_layer(rng, spec: RecurrentSpec, i: int, p: str) -> dict[str, np.ndarray]:
    e, f = spec.n_embd, spec.n_ff
    hd = e // spec.n_head
    w = {
        p + "attn_norm.weight": np.ones(e, dtype=np.float32),
        p + "ffn_norm.weight": np.ones(e, dtype=np.float32),
        p + "ffn_gate.weight": _lin(rng, f, e),
        p + "ffn_up.weight": _lin(rng, f, e),
        p + "ffn_down.weight": _lin(rng, e, f, spec.layer_gain),
    }
    if i in spec.attn_layers:
        kv = hd * spec.n_head_kv
        w.update({
            p + "attn_q_norm.weight": np.ones(hd, dtype=np.float32),
            p + "attn_k_norm.weight": np.ones(hd, dtype=np.float32),
            p + "attn_q.weight": _lin(rng, e, e),
            p + "attn_k.weight": _lin(rng, kv, e),
            p + "attn_v.weight": _lin(rng, kv, e),
            p + "attn_output.weight": _lin(rng, e, e, spec.layer_gain),
        })
    else:
        w.update({
            p + "shortconv.conv.weight": _lin(rng, e, spec.l_cache),
            p + "shortconv.in_proj.weight": _lin(rng, 3 * e, e),
            p + "shortconv.out_proj.weight": _lin(rng, e, e, spec.layer_gain),
        })
    return w


# Not perturbed by ``noise``: the SSM decay must stay negative (a positive A diverges).
_NO_NOISE = ("ssm_a",)
_F16_OK = ("token_embd.weight", "output.weight", "ssm_in.weight", "ssm_x.weight", "ssm_dt.weight",
           "ssm_out.weight", "in_proj.weight", "out_proj.weight", "attn_q.weight", "attn_k.weight",
           "attn_v.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")


def _weights(spec: RecurrentSpec, n_vocab: int) -> dict[str, np.ndarray]:
    if spec.arch not in ARCHS:
        raise ValueError(f"unknown arch {spec.arch!r} (one of {', '.join(ARCHS)})")
    rng = np.random.default_rng(spec.seed)
    e = spec.n_embd
    w: dict[str, np.ndarray] = {"token_embd.weight": rng.standard_normal((n_vocab, e)).astype(np.float32)}
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        if spec.arch == "mamba":
            w.update(_mamba_layer(rng, spec, p))
        elif spec.arch == "mamba2":
            w.update(_mamba2_layer(rng, spec, p))
        else:
            w.update(_lfm2_layer(rng, spec, i, p))
    # LFM2 names its final norm token_embd_norm (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2).
    norm = "token_embd_norm.weight" if spec.arch == "lfm2" else "output_norm.weight"
    w[norm] = np.ones(e, dtype=np.float32)
    w["output.weight"] = _lin(rng, n_vocab, e, gain=spec.scale * 4.0)
    # Token 0 (<|endoftext|>) never wins: its output row is zero.
    w["output.weight"][0, :] = 0.0
    if spec.noise:
        add_weight_noise(w, spec.noise, spec.noise_seed,
                         skip=lambda name, v: name.endswith(_NO_NOISE) or not v.std() > 0)
    if spec.bigram_seed:   # the same sigma as TinySpec's bigram models
        w["output.weight"] = bigram_output(w["token_embd.weight"], spec.bigram_seed, spec.scale)
    return w


def bigram_sigma(seed: int, n_vocab: int) -> np.ndarray:
    """The permutation a ``bigram_seed`` model follows: it predicts sigma[last token]."""
    return np.random.default_rng(seed).permutation(n_vocab)


# ---------------------------------------------------------------------------------------
# Writing


def write_recurrent_model(path: str | Path, spec: RecurrentSpec = RecurrentSpec()) -> Path:
    """Write a loadable tiny Mamba / Mamba-2 / LFM2 GGUF model and return its path."""
    path = Path(path)
    tokens, merges = bpe_vocab(spec.n_merges)
    tokens = list(tokens)
    n_vocab = len(tokens)
    types = [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens]
    weights = _weights(spec, n_vocab)

    w = gguf.GGUFWriter(str(path), spec.arch)
    w.add_name(spec.name)
    w.add_context_length(spec.n_ctx_train)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_layer_norm_rms_eps(1e-5)
    if spec.arch in ("mamba", "mamba2"):
        w.add_feed_forward_length(0)
        w.add_head_count(0)
        w.add_head_count_kv(0)
        w.add_ssm_conv_kernel(spec.d_conv)
        w.add_ssm_inner_size(spec.d_inner)
        w.add_ssm_state_size(spec.d_state)
        if spec.arch == "mamba":
            w.add_ssm_time_step_rank(spec.dt_rank or -(-spec.n_embd // 16))
        else:
            w.add_ssm_time_step_rank(spec.dt_rank or 4)
            w.add_ssm_group_count(spec.n_group)
    else:
        bad = [i for i in spec.attn_layers if not 0 <= i < spec.n_layer]
        if bad or not spec.attn_layers or len(spec.attn_layers) == spec.n_layer:
            raise ValueError("lfm2 needs at least one attention layer and one convolution layer")
        w.add_feed_forward_length(spec.n_ff)
        w.add_head_count(spec.n_head)
        # llama.cpp marks a layer recurrent (short convolution) where head_count_kv is 0
        w.add_head_count_kv([spec.n_head_kv if i in spec.attn_layers else 0 for i in range(spec.n_layer)])
        w.add_rope_freq_base(1_000_000.0)
        w.add_shortconv_l_cache(spec.l_cache)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.f16 else gguf.LlamaFileType.ALL_F32)
    add_bpe_tokenizer(w, tokens, types, merges, spec)
    for name, arr in weights.items():
        # only the projection matrices go F16: ggml's ssm_conv kernel, A, D and norms stay F32
        if spec.f16 and arr.ndim == 2 and name.endswith(_F16_OK):
            arr = arr.astype(np.float16)
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def add_bpe_tokenizer(w: gguf.GGUFWriter, tokens: list[str], types: list, merges, spec) -> None:
    """The byte-level BPE vocabulary, special tokens and chat template (``spec`` gives
    bos_id, eos_id and add_bos)."""
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_merges(list(merges))
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_bos_token_id(spec.bos_id)
    w.add_eos_token_id(spec.eos_id)
    w.add_add_bos_token(spec.add_bos)
    w.add_chat_template(CHATML)


def write_model(path: str | Path, spec: TinySpec | RecurrentSpec | object) -> Path:
    """Write any kind of tiny model (a spec with its own ``write`` method writes itself)."""
    if hasattr(spec, "write"):
        return spec.write(path)
    if isinstance(spec, RecurrentSpec):
        return write_recurrent_model(path, spec)
    return write_tiny_model(path, spec)


@dataclass
class RecurrentZoo:
    """Generates tiny models (``TinySpec``, ``RecurrentSpec``, ``Qwen35Spec``...) into one folder, once each."""

    root: Path
    made: dict[object, Path] = field(default_factory=dict)

    def get(self, spec=RecurrentSpec(), name: str | None = None) -> Path:
        if spec not in self.made:
            fname = name or f"tiny-rec-{len(self.made)}.gguf"
            self.made[spec] = write_model(Path(self.root) / fname, spec)
        return self.made[spec]
