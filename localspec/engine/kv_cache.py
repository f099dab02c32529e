"""The KV cache types llama.cpp takes, by the name ``--cache-type`` takes them.

The values are llama.cpp's ``ggml_type`` ids. A module of its own, free of llama.cpp, so that
the command line can offer the choices without loading it.
"""

CACHE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "bf16": 30}
