"""Tiny ``qwen35`` (Qwen 3.5 / 3.6 dense) GGUF models generated at test time.

The architecture ``qwen-27b`` uses, at toy size: Gated DeltaNet linear-attention layers (a
recurrent conv + delta-rule state) with a full gated-attention layer every
``full_attention_interval`` layers, each followed by a SwiGLU feed-forward block, and
optionally one multi-token-prediction (MTP, "nextn") block appended after the trunk, which
llama.cpp runs in an ``LLAMA_CONTEXT_TYPE_MTP`` context to draft the token after next.

One spec writes three kinds of file, with identical weights where they overlap (the trunk
is drawn before the MTP block, from the same seed):

* ``part="full"``: the trunk, plus the MTP block when ``mtp`` (an embedded head);
* ``part="trunk"``: the trunk alone (what ggml-org ships as the main GGUF);
* ``part="mtp"``: the MTP block alone with the embeddings, final norm and LM head it shares
  (what ggml-org ships as ``mtp-*.gguf``; llama.cpp loads it "mtp only").

They share :mod:`tiny_gguf`'s byte-level BPE vocabulary; ``n_vocab`` pads it with plain
tokens no merge produces, up to the real 248320 if asked (keep ``n_embd`` small then).
``bigram_seed`` makes the trunk predict sigma(last token) as the other tiny models do, and
the MTP block pass the token embedding through (``eh_proj`` = [I, 0]), so it predicts
sigma(sigma(...)), the target's own next choice: an MTP head that is mostly right, made
less so by ``mtp_noise``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np
from tiny_gguf import SPECIALS, add_weight_noise, bigram_output, bpe_vocab
from tiny_recurrent import _lin, add_bpe_tokenizer

REAL_VOCAB = 248320   # Qwen 3.5's vocabulary size


@dataclass(frozen=True)
class Qwen35Spec:
    """What to generate. Equal ``seed`` and shape give equal trunk weights."""

    n_embd: int = 64
    n_layer: int = 4                 # trunk layers (the MTP block comes after them)
    full_attention_interval: int = 4  # layer i is full attention when (i + 1) % interval == 0
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_rot: int = 8                   # partial rotary (the real model rotates a quarter)
    n_ff: int = 128
    n_ctx_train: int = 4096
    # Gated DeltaNet
    d_conv: int = 4
    d_state: int = 16                # head_k_dim = head_v_dim
    n_k_heads: int = 2               # ssm.group_count
    n_v_heads: int = 4               # ssm.time_step_rank
    # MTP
    mtp: bool = False                # an MTP (nextn) block after the trunk
    part: str = "full"               # "full", "trunk" or "mtp" (see the module docstring)
    mtp_noise: float = 0.0           # extra noise on the MTP block only
    # shared with TinySpec / RecurrentSpec
    n_vocab: int = 0                 # 0: the BPE vocabulary as is; more: padded with plain tokens
    seed: int = 0
    scale: float = 1.0
    noise: float = 0.0
    noise_seed: int = 1
    n_merges: int = 200
    eos_id: int = 2
    bos_id: int = 1
    add_bos: bool = False
    bigram_seed: int = 0
    layer_gain: float = 1.0
    f16: bool = False
    name: str = "tiny-qwen35"

    def with_(self, **kw) -> Qwen35Spec:
        return replace(self, **kw)

    @property
    def n_layer_all(self) -> int:
        return self.n_layer + (1 if self.mtp else 0)

    def is_recurrent(self, i: int) -> bool:
        return i < self.n_layer and (i + 1) % self.full_attention_interval != 0

    def write(self, path: str | Path) -> Path:
        return write_qwen35_model(path, self)


def qwen35_spec(**kw) -> Qwen35Spec:
    return Qwen35Spec(**kw)


# ---------------------------------------------------------------------------------------
# Weights (numpy shapes are ggml's ne reversed)


def _attention(rng, s: Qwen35Spec, p: str, gain: float) -> dict[str, np.ndarray]:
    e, hd = s.n_embd, s.head_dim
    q, kv = s.n_head * hd, s.n_head_kv * hd
    return {
        p + "attn_q.weight": _lin(rng, 2 * q, e),        # query and its output gate
        p + "attn_k.weight": _lin(rng, kv, e),
        p + "attn_v.weight": _lin(rng, kv, e),
        p + "attn_output.weight": _lin(rng, e, q, gain),
        p + "attn_q_norm.weight": np.ones(hd, dtype=np.float32),
        p + "attn_k_norm.weight": np.ones(hd, dtype=np.float32),
    }


def _delta_net(rng, s: Qwen35Spec, p: str, gain: float) -> dict[str, np.ndarray]:
    e = s.n_embd
    k_dim, v_dim = s.d_state * s.n_k_heads, s.d_state * s.n_v_heads
    conv = 2 * k_dim + v_dim
    return {
        p + "attn_qkv.weight": _lin(rng, conv, e),
        p + "attn_gate.weight": _lin(rng, v_dim, e),
        p + "ssm_conv1d.weight": _lin(rng, conv, s.d_conv),
        p + "ssm_dt.bias": rng.uniform(-1.0, 0.0, s.n_v_heads).astype(np.float32),
        # -exp(A_log): a negative decay rate per value head
        p + "ssm_a": -rng.uniform(0.5, 2.0, s.n_v_heads).astype(np.float32),
        p + "ssm_beta.weight": _lin(rng, s.n_v_heads, e),
        p + "ssm_alpha.weight": _lin(rng, s.n_v_heads, e),
        p + "ssm_norm.weight": np.ones(s.d_state, dtype=np.float32),
        p + "ssm_out.weight": _lin(rng, e, v_dim, gain),
    }


def _block(rng, s: Qwen35Spec, p: str, recurrent: bool, gain: float) -> dict[str, np.ndarray]:
    e, f = s.n_embd, s.n_ff
    w = {p + "attn_norm.weight": np.ones(e, dtype=np.float32),
         p + "post_attention_norm.weight": np.ones(e, dtype=np.float32)}
    w.update(_delta_net(rng, s, p, gain) if recurrent else _attention(rng, s, p, gain))
    w.update({p + "ffn_gate.weight": _lin(rng, f, e), p + "ffn_up.weight": _lin(rng, f, e),
              p + "ffn_down.weight": _lin(rng, e, f, gain)})
    return w


def _mtp_block(s: Qwen35Spec) -> dict[str, np.ndarray]:
    """The nextn block: a full-attention decoder block fed by eh_proj([enorm(embedding of
    the token), hnorm(target's hidden state before it)])."""
    rng = np.random.default_rng(s.seed + 7_777)
    e = s.n_embd
    p = f"blk.{s.n_layer}."
    w = _block(rng, s, p, recurrent=False, gain=s.layer_gain)
    eh = np.zeros((e, 2 * e), dtype=np.float32)
    eh[:, :e] = np.eye(e, dtype=np.float32)           # pass the token embedding through
    eh[:, e:] = _lin(rng, e, e, 0.1)                  # and a little of the hidden state
    w[p + "nextn.eh_proj.weight"] = eh
    for name in ("enorm", "hnorm", "shared_head_norm"):
        w[p + f"nextn.{name}.weight"] = np.ones(e, dtype=np.float32)
    if s.mtp_noise:
        add_weight_noise(w, s.mtp_noise, s.noise_seed + 99)
    return w


def _vocab(s: Qwen35Spec) -> tuple[list[str], list, tuple[str, ...]]:
    tokens, merges = bpe_vocab(s.n_merges)
    tokens = list(tokens)
    types = [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens]
    if s.n_vocab > len(tokens):
        # Plain tokens that no merge produces: the size of a real vocabulary without
        # making tokenization any slower (user-defined tokens would be matched as specials).
        pad = s.n_vocab - len(tokens)
        tokens += [f"x{i:06d}" for i in range(pad)]
        types += [gguf.TokenType.NORMAL] * pad
    return tokens, types, merges


def _weights(s: Qwen35Spec, n_vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(s.seed)
    e = s.n_embd
    w: dict[str, np.ndarray] = {"token_embd.weight": rng.standard_normal((n_vocab, e)).astype(np.float32)}
    for i in range(s.n_layer):
        w.update(_block(rng, s, f"blk.{i}.", s.is_recurrent(i), s.layer_gain))
    w["output_norm.weight"] = np.ones(e, dtype=np.float32)
    w["output.weight"] = _lin(rng, n_vocab, e, gain=s.scale * 4.0)
    w["output.weight"][0, :] = 0.0   # <|endoftext|> never wins
    if s.noise:
        add_weight_noise(w, s.noise, s.noise_seed, skip=lambda name, v: not v.std() > 0)
    if s.bigram_seed:
        w["output.weight"] = bigram_output(w["token_embd.weight"], s.bigram_seed, s.scale)
    if s.mtp:
        w.update(_mtp_block(s))
    return w


_SHARED = ("token_embd.weight", "output_norm.weight", "output.weight")


def write_qwen35_model(path: str | Path, s: Qwen35Spec = Qwen35Spec()) -> Path:
    """Write a loadable tiny qwen35 GGUF (see ``part``) and return its path."""
    if s.part not in ("full", "trunk", "mtp"):
        raise ValueError(f"unknown part {s.part!r}")
    if s.part != "full" and not s.mtp:
        raise ValueError("part='trunk'/'mtp' split a model that has an MTP block (mtp=True)")
    path = Path(path)
    tokens, types, merges = _vocab(s)
    weights = _weights(s, len(tokens))
    mtp_prefix = f"blk.{s.n_layer}."
    if s.part == "trunk":
        weights = {k: v for k, v in weights.items() if not k.startswith(mtp_prefix)}
    elif s.part == "mtp":
        weights = {k: v for k, v in weights.items() if k.startswith(mtp_prefix) or k in _SHARED}
    with_mtp = s.mtp and s.part != "trunk"

    w = gguf.GGUFWriter(str(path), "qwen35")
    w.add_name(s.name + ("-mtp" if s.part == "mtp" else ""))
    w.add_context_length(s.n_ctx_train)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer + (1 if with_mtp else 0))
    if with_mtp:
        w.add_nextn_predict_layers(1)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.n_rot)
    w.add_rope_dimension_sections([s.n_rot // 2 - s.n_rot // 4, s.n_rot // 4, 0, 0])
    w.add_rope_freq_base(10_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_ssm_conv_kernel(s.d_conv)
    w.add_ssm_state_size(s.d_state)
    w.add_ssm_group_count(s.n_k_heads)
    w.add_ssm_time_step_rank(s.n_v_heads)
    w.add_ssm_inner_size(s.d_state * s.n_v_heads)
    w.add_full_attention_interval(s.full_attention_interval)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if s.f16 else gguf.LlamaFileType.ALL_F32)
    add_bpe_tokenizer(w, tokens, types, merges, s)
    for name, arr in weights.items():
        if s.f16 and arr.ndim == 2 and "ssm_conv1d" not in name:   # ggml_ssm_conv wants F32
            arr = arr.astype(np.float16)
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def split_paths(root: Path, s: Qwen35Spec, stem: str) -> tuple[Path, Path]:
    """Write ``s`` as a trunk GGUF and a sibling ``mtp-*.gguf``; return both paths."""
    trunk = write_qwen35_model(Path(root) / f"{stem}.gguf", s.with_(mtp=True, part="trunk"))
    head = write_qwen35_model(Path(root) / f"mtp-{stem}.gguf", s.with_(mtp=True, part="mtp"))
    return trunk, head
