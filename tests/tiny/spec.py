"""What tiny model to generate: one frozen spec for every architecture.

Equal specs give equal files, so a spec is also the key a :class:`~tiny.write.TinyZoo`
caches by. Fields an architecture does not use keep their defaults and change nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

ARCHS = ("llama", "mamba", "mamba2", "lfm2", "qwen35")
RECURRENT_ARCHS = ("mamba", "mamba2", "lfm2")   # whose memory llama.cpp cannot cut anywhere
REAL_VOCAB = 248320   # Qwen 3.5's vocabulary size

# Per architecture, the values of the fields left as None.
_DEFAULTS = {"n_layer": {"qwen35": 4}, "n_ctx_train": {"qwen35": 4096}}
_FALLBACK = {"n_layer": 2, "n_ctx_train": 2048}


@dataclass(frozen=True)
class TinySpec:
    """A tiny model with random weights (``seed``) and the shared BPE vocabulary.

    The architectures (``arch``):

    * ``llama``: a transformer with grouped-query attention and SwiGLU blocks.
    * ``mamba``: a pure state-space model (``llama_model_is_recurrent``): Mamba-1 blocks, the
      whole sequence in a fixed-size conv + SSM state.
    * ``mamba2``: Mamba-2 blocks (multi-head SSM with groups and a gated RMS norm), the
      recurrent block of nemotron_h, granitehybrid and falcon-h1.
    * ``lfm2``: a hybrid (``llama_model_is_hybrid``), LiquidAI's LFM2: gated short convolutions
      with attention at ``attn_layers``; its context supports ``n_rs_seq`` rollback snapshots.
    * ``qwen35``: Qwen 3.5 / 3.6 dense at toy size: Gated DeltaNet layers with full gated
      attention every ``full_attention_interval`` layers, and with ``mtp`` one
      multi-token-prediction (nextn) block after the trunk, which llama.cpp runs in an MTP
      context to draft the token after next. ``part`` writes the whole model ("full"), the
      trunk alone ("trunk", ggml-org's main GGUF) or the MTP block with the embeddings, final
      norm and LM head it shares ("mtp", ggml-org's ``mtp-*.gguf``), with equal weights.

    For every architecture ``noise`` perturbs every matrix by relative Gaussian noise (a draft
    that agrees only partly with its target), and ``bigram_seed`` makes the model predict
    sigma(last token) for a permutation sigma that depends on the seed alone, so models of
    any size and architecture with one seed agree (with a small ``layer_gain`` the residual
    stream stays close to the last token's embedding). A qwen35 MTP block passes the token
    embedding through, so it predicts the target's own next choice, less often with
    ``mtp_noise``.

    Raises:
        ValueError: an unknown ``arch`` or ``part``, a split part without ``mtp``, or an lfm2
            without both an attention and a convolution layer.
    """

    arch: str = "llama"
    n_embd: int = 64
    n_layer: int | None = None    # None: 2 (qwen35: 4 trunk layers; the MTP block comes after)
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx_train: int | None = None   # None: 2048 (qwen35: 4096)
    seed: int = 0
    scale: float = 1.0            # gain of the output projection (higher: peakier logits)
    noise: float = 0.0            # relative Gaussian noise added to every matrix
    noise_seed: int = 1
    bigram_seed: int = 0          # nonzero: predict sigma(last token), see the class docstring
    bigram_swaps: tuple[int, ...] = ()   # tokens taken in pairs (t, u): after t predict sigma(u) and back
    layer_gain: float = 1.0       # scales what each layer adds to the residual stream
    f16: bool = False             # store the matrices as F16 (the SSM kernels and norms stay F32)
    name: str | None = None       # None: "tiny", or "tiny-<arch>"
    # the vocabulary
    n_merges: int = 200
    eos_id: int = 2
    bos_id: int = 1
    add_bos: bool = False
    vocab_type: str = "gpt2"
    chat_template: str | None = None   # None: ChatML
    token_edits: tuple[tuple[int, str], ...] = ()   # (id, new text)
    vocab_shuffle: int = 0        # nonzero: permute the non-special tokens (a different vocabulary)
    n_vocab: int = 0              # more than the BPE's: padded with plain tokens (up to REAL_VOCAB)
    extra_tokens: int = 0         # user-defined tokens at the end, with output rows drawn apart
    blind_output: bool = False    # a zero final norm: all logits equal, argmax is token 0
    # mamba, mamba2, qwen35 (d_inner is 2 * n_embd for mamba and mamba2)
    d_state: int = 16             # qwen35: head_k_dim = head_v_dim
    d_conv: int = 4
    dt_rank: int = 0              # mamba: 0 means ceil(n_embd / 16); mamba2: the head count (0: 4)
    n_group: int = 1              # mamba2
    # lfm2: the attention layers (the others are short convolutions of kernel l_cache)
    attn_layers: tuple[int, ...] = (1,)
    l_cache: int = 3
    # qwen35
    full_attention_interval: int = 4  # layer i is full attention when (i + 1) % interval == 0
    head_dim: int = 16
    n_rot: int = 8                # partial rotary (the real model rotates a quarter)
    n_k_heads: int = 2            # ssm.group_count
    n_v_heads: int = 4            # ssm.time_step_rank
    mtp: bool = False
    part: str = "full"
    mtp_noise: float = 0.0        # extra noise on the MTP block only

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ValueError(f"unknown arch {self.arch!r} (one of {', '.join(ARCHS)})")
        for field, by_arch in _DEFAULTS.items():
            if getattr(self, field) is None:
                object.__setattr__(self, field, by_arch.get(self.arch, _FALLBACK[field]))
        if self.name is None:
            object.__setattr__(self, "name", "tiny" if self.arch == "llama" else f"tiny-{self.arch}")
        if self.part not in ("full", "trunk", "mtp"):
            raise ValueError(f"unknown part {self.part!r}")
        if self.part != "full" and not self.mtp:
            raise ValueError("part='trunk'/'mtp' split a model that has an MTP block (mtp=True)")
        if self.arch == "lfm2":
            bad = [i for i in self.attn_layers if not 0 <= i < self.n_layer]
            if bad or not self.attn_layers or len(self.attn_layers) == self.n_layer:
                raise ValueError("lfm2 needs at least one attention layer and one convolution layer")

    def with_(self, **kw) -> TinySpec:
        return replace(self, **kw)

    @property
    def d_inner(self) -> int:
        return 2 * self.n_embd

    @property
    def with_mtp(self) -> bool:
        """Whether the written file holds the MTP block."""
        return self.mtp and self.part != "trunk"

    def is_recurrent(self, i: int) -> bool:
        """Whether qwen35 layer ``i`` is a Gated DeltaNet layer (not full attention)."""
        return i < self.n_layer and (i + 1) % self.full_attention_interval != 0


def mamba_spec(**kw) -> TinySpec:
    return TinySpec(arch="mamba", **kw)


def mamba2_spec(**kw) -> TinySpec:
    return TinySpec(arch="mamba2", **kw)


def hybrid_spec(**kw) -> TinySpec:
    return TinySpec(arch="lfm2", **kw)


def qwen35_spec(**kw) -> TinySpec:
    return TinySpec(arch="qwen35", **kw)
