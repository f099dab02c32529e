"""The tiny models' vocabulary: a byte-level BPE learnt from a small built-in corpus.

256 byte tokens (GPT-2's reversible byte-to-unicode table) plus merges, after three ChatML
special tokens, and a ChatML chat template. Every architecture shares it, so any two tiny
models pair as target and draft unless a spec changes the vocabulary on purpose.
"""

from __future__ import annotations

import functools
from collections import Counter

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
    """The byte-level BPE trained on CORPUS.

    Args:
        n_merges: the most merges to learn (fewer when the corpus runs out of pairs).

    Returns:
        (tokens, merges): the special tokens first, then the 256 bytes, then one token a merge.
    """
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


def vocabulary(spec) -> tuple[list[str], list[gguf.TokenType], tuple[str, ...]]:
    """The tokens a spec's model has, with their types and the BPE merges.

    Args:
        spec: a :class:`~tiny.spec.TinySpec`; its ``n_merges``, ``vocab_shuffle``,
            ``token_edits``, ``n_vocab`` and ``extra_tokens`` shape the vocabulary.

    Returns:
        (tokens, types, merges). Padding up to ``n_vocab`` is plain tokens no merge makes
        (the size of a real vocabulary, tokenizing no slower); ``extra_tokens`` are
        user-defined ``<extra_i>`` tokens after everything else.
    """
    tokens, merges = bpe_vocab(spec.n_merges)
    tokens = list(tokens)
    if spec.vocab_shuffle:
        rest = tokens[len(SPECIALS):]
        np.random.default_rng(spec.vocab_shuffle).shuffle(rest)
        tokens = tokens[:len(SPECIALS)] + rest
    for i, text in spec.token_edits:
        tokens[i] = text
    tokens += [f"x{i:06d}" for i in range(spec.n_vocab - len(tokens))]
    tokens += [f"<extra_{i}>" for i in range(spec.extra_tokens)]
    types = [gguf.TokenType.CONTROL if t in SPECIALS else
             gguf.TokenType.USER_DEFINED if t.startswith("<extra_") else gguf.TokenType.NORMAL for t in tokens]
    return tokens, types, merges


def add_tokenizer(w: gguf.GGUFWriter, spec, tokens: list[str], types: list, merges) -> None:
    """Write the vocabulary, its special token ids and the chat template into ``w``.

    Args:
        w: the writer of the model file.
        spec: gives ``vocab_type`` ("gpt2": BPE with merges; another: scored tokens),
            ``bos_id``, ``eos_id``, ``add_bos`` and ``chat_template``.
        tokens, types, merges: what :func:`vocabulary` returned.
    """
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model(spec.vocab_type)
    if spec.vocab_type == "gpt2":
        w.add_tokenizer_pre("gpt-2")
        w.add_token_merges(list(merges))
    else:
        w.add_token_scores([0.0] * len(tokens))
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_bos_token_id(spec.bos_id)
    w.add_eos_token_id(spec.eos_id)
    w.add_add_bos_token(spec.add_bos)
    w.add_chat_template(spec.chat_template or CHATML)
