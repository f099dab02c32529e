"""Tiny GGUF models generated at test time with the ``gguf`` package.

Each model is a real llama-architecture network with random weights and a real byte-level
BPE tokenizer (256 byte tokens plus merges learnt from a small built-in corpus, and ChatML
special tokens), small enough to load and run in milliseconds. A draft that agrees only
partly with its target is the target's weights plus Gaussian noise.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import gguf
import numpy as np

CORPUS = """
The quick brown fox jumps over the lazy dog. The dog sleeps in the sun and the fox runs
into the forest. def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)
for i in range(10): print(i, fibonacci(i)) Speculative decoding lets a small draft model
propose tokens that the large target model verifies in one batch. The capital of France is
Paris, the capital of Italy is Rome, and the capital of Spain is Madrid. Once upon a time
there was a little robot who wanted to learn how to paint the sky with all the colours of
the rainbow. import numpy as np; x = np.zeros((3, 3)); print(x.shape) the the the and and
"""

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@functools.lru_cache(maxsize=1)
def _byte_chars() -> list[str]:
    """GPT-2's reversible byte-to-unicode table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


@functools.lru_cache(maxsize=4)
def bpe_vocab(n_merges: int = 200) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tokens, merges) of a byte-level BPE trained on CORPUS; specials come first."""
    chars = _byte_chars()
    words = []
    for i, w in enumerate(CORPUS.split()):
        text = (" " + w) if i else w
        words.append(tuple(chars[b] for b in text.encode("utf-8")))
    counts = Counter(words)
    vocab = list(SPECIALS) + chars
    merges: list[str] = []
    seqs = {w: list(w) for w in counts}
    for _ in range(n_merges):
        pairs: Counter = Counter()
        for w, c in counts.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        vocab.append(a + b)
        for w in seqs:
            s = seqs[w]
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return tuple(vocab), tuple(merges)


@dataclass(frozen=True)
class TinySpec:
    """What to generate. Equal ``seed`` and shape give equal base weights."""

    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx_train: int = 2048
    seed: int = 0
    scale: float = 1.0            # gain of the output projection (higher: peakier logits)
    noise: float = 0.0            # relative Gaussian noise added to every weight
    noise_seed: int = 1
    n_merges: int = 200
    eos_id: int = 2
    bos_id: int = 1
    add_bos: bool = False
    vocab_type: str = "gpt2"
    token_edits: tuple[tuple[int, str], ...] = ()   # (id, new text)
    vocab_shuffle: int = 0        # nonzero: permute the non-special tokens (a different vocabulary)
    extra_tokens: int = 0
    blind_output: bool = False    # output_norm = 0: all logits equal, argmax is token 0
    bigram_seed: int = 0          # nonzero: the model predicts sigma(last token) for a fixed
                                  # permutation sigma, whatever its size: pairs of any sizes agree
    layer_gain: float = 1.0       # scales what each layer adds to the residual stream
    f16: bool = False             # store the matrices as F16 (half the file size)
    name: str = "tiny"

    def with_(self, **kw) -> TinySpec:
        return replace(self, **kw)


def _weights(spec: TinySpec, n_vocab: int) -> dict[str, np.ndarray]:
    w = _base_weights(spec, n_vocab - spec.extra_tokens)
    if spec.extra_tokens:
        # Extra tokens (like the padding ids of a larger vocabulary) get rows of their own,
        # drawn apart, so the model agrees with its base on every shared id.
        rng = np.random.default_rng(50_000 + spec.seed)
        e, x = spec.n_embd, spec.extra_tokens
        w["token_embd.weight"] = np.concatenate(
            [w["token_embd.weight"], rng.standard_normal((x, e)).astype(np.float32)])
        extra_out = (rng.standard_normal((x, e)) * spec.scale * 4.0 / np.sqrt(e)).astype(np.float32)
        w["output.weight"] = np.concatenate([w["output.weight"], extra_out])
    if spec.noise:
        add_weight_noise(w, spec.noise, spec.noise_seed)
    if spec.bigram_seed:
        w["output.weight"] = bigram_output(w["token_embd.weight"], spec.bigram_seed, spec.scale)
    if spec.blind_output:
        w["output_norm.weight"] = np.zeros(spec.n_embd, dtype=np.float32)
    return w


def _base_weights(spec: TinySpec, n_vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    e, f = spec.n_embd, spec.n_ff
    kv = e // spec.n_head * spec.n_head_kv

    def lin(out_dim: int, in_dim: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((out_dim, in_dim)) * gain / np.sqrt(in_dim)).astype(np.float32)

    w: dict[str, np.ndarray] = {"token_embd.weight": rng.standard_normal((n_vocab, e)).astype(np.float32)}
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = np.ones(e, dtype=np.float32)
        w[p + "attn_q.weight"] = lin(e, e)
        w[p + "attn_k.weight"] = lin(kv, e)
        w[p + "attn_v.weight"] = lin(kv, e)
        w[p + "attn_output.weight"] = lin(e, e, spec.layer_gain)
        w[p + "ffn_norm.weight"] = np.ones(e, dtype=np.float32)
        w[p + "ffn_gate.weight"] = lin(f, e)
        w[p + "ffn_up.weight"] = lin(f, e)
        w[p + "ffn_down.weight"] = lin(e, f, spec.layer_gain)
    w["output_norm.weight"] = np.ones(e, dtype=np.float32)
    w["output.weight"] = lin(n_vocab, e, gain=spec.scale * 4.0)
    # Token 0 (<|endoftext|>) never wins for the target: its output row is zero.
    w["output.weight"][0, :] = 0.0
    return w


def write_tiny_model(path: str | Path, spec: TinySpec = TinySpec()) -> Path:
    """Write a loadable tiny GGUF model and return its path."""
    path = Path(path)
    tokens, merges = bpe_vocab(spec.n_merges)
    tokens = list(tokens)
    if spec.vocab_shuffle:
        rest = tokens[len(SPECIALS):]
        np.random.default_rng(spec.vocab_shuffle).shuffle(rest)
        tokens = tokens[:len(SPECIALS)] + rest
    for i, text in spec.token_edits:
        tokens[i] = text
    tokens += [f"<extra_{i}>" for i in range(spec.extra_tokens)]
    n_vocab = len(tokens)
    types = [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens]
    types = [gguf.TokenType.USER_DEFINED if t.startswith("<extra_") else ty for t, ty in zip(tokens, types)]

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(spec.name)
    w.add_context_length(spec.n_ctx_train)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_rope_dimension_count(spec.n_embd // spec.n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.f16 else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model(spec.vocab_type)
    if spec.vocab_type == "gpt2":
        w.add_tokenizer_pre("gpt-2")
        w.add_token_merges(list(merges))
    else:
        w.add_token_scores([0.0] * n_vocab)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_bos_token_id(spec.bos_id)
    w.add_eos_token_id(spec.eos_id)
    w.add_add_bos_token(spec.add_bos)
    w.add_chat_template(CHATML)
    for name, arr in _weights(spec, n_vocab).items():
        if spec.f16 and arr.ndim == 2:
            arr = arr.astype(np.float16)
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@dataclass
class TinyZoo:
    """Generates models into one folder on demand, once each."""

    root: Path
    made: dict[TinySpec, Path] = field(default_factory=dict)

    def get(self, spec: TinySpec = TinySpec(), name: str | None = None) -> Path:
        if spec not in self.made:
            fname = name or f"tiny-{len(self.made)}.gguf"
            self.made[spec] = write_tiny_model(self.root / fname, spec)
        return self.made[spec]


def add_weight_noise(w: dict, noise: float, seed: int, skip=lambda name, v: False) -> None:
    """Perturb every 2-D tensor (a "draft" of the same model): ``noise`` times its std."""
    rng = np.random.default_rng(10_000 + seed)
    for k, v in w.items():
        if v.ndim == 2 and not skip(k, v):
            w[k] = (v + rng.standard_normal(v.shape).astype(np.float32) * noise * v.std()).astype(np.float32)


def bigram_output(emb: np.ndarray, seed: int, scale: float) -> np.ndarray:
    """An output matrix whose row sigma(t) is token t's embedding: with a quiet residual
    stream the logits peak at sigma(last token), sigma the permutation ``seed`` draws."""
    n_vocab, e = emb.shape
    sigma = np.random.default_rng(seed).permutation(n_vocab)
    out = np.zeros((n_vocab, e), dtype=np.float32)
    out[sigma] = emb * (scale * 4.0 / np.sqrt(e))
    out[0, :] = 0.0
    return out
