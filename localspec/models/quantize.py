"""Make quantized (or F16) copies of GGUF models with llama.cpp's own quantizer."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ..engine.gguf_meta import read_metadata
from ..errors import BadInput, LocalspecError

# llama_ftype values (llama.h)
FTYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9,
    "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
    "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "BF16": 32,
}


def quantize(src: str | os.PathLike, dst: str | os.PathLike, qtype: str, threads: int | None = None) -> Path:
    """Write ``dst``, a ``qtype`` copy of ``src``; a partial file never survives a failure."""
    import llama_cpp.llama_cpp as ll

    from ..engine.backend import default_threads, init_backend, last_log_error

    key = qtype.upper()
    if key not in FTYPES:
        raise BadInput(f"unknown quantization {qtype!r} (one of {', '.join(FTYPES)})")
    read_metadata(src)  # a clear error for a missing or broken file
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".partial")
    init_backend()
    params = ll.llama_model_quantize_default_params()
    params.ftype = FTYPES[key]
    params.allow_requantize = True
    params.nthread = threads or default_threads()
    try:
        rc = ll.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
        if rc != 0:
            why = last_log_error()
            raise LocalspecError(f"quantizing {Path(src).name} to {key} failed{': ' + why if why else ''}")
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dst
