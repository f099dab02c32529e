"""localspec: speculative decoding for local GGUF models on llama.cpp."""

__version__ = "0.1.0"
