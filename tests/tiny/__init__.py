"""Tiny GGUF models generated at test time with the ``gguf`` package.

Each is a real network of one of llama.cpp's architectures (llama, mamba, mamba2, lfm2,
qwen35 with or without an MTP block) with random weights and a real byte-level BPE
tokenizer with ChatML special tokens, small enough to load and run in milliseconds. One
spec class (:class:`TinySpec`, parametrised by ``arch``) says what to generate; one writer
(:func:`write_model`) writes any of them; a :class:`TinyZoo` makes each spec once.

* :mod:`.spec`: the spec, the architectures and their defaults;
* :mod:`.vocab`: the shared vocabulary and chat template;
* :mod:`.weights`: the tensors of each architecture, noise and bigram heads;
* :mod:`.write`: the GGUF file, split MTP files, the zoo.
"""

from .spec import ARCHS, REAL_VOCAB, RECURRENT_ARCHS, TinySpec, hybrid_spec, mamba2_spec, mamba_spec, qwen35_spec
from .vocab import CHATML, SPECIALS, bpe_vocab
from .weights import answer_stretch_swaps, bigram_sigma
from .write import TinyZoo, split_paths, write_model

__all__ = ["ARCHS", "CHATML", "REAL_VOCAB", "RECURRENT_ARCHS", "SPECIALS", "TinySpec", "TinyZoo",
           "answer_stretch_swaps", "bigram_sigma", "bpe_vocab", "hybrid_spec", "mamba2_spec", "mamba_spec",
           "qwen35_spec", "split_paths", "write_model"]
