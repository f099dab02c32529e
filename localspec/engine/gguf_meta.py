"""Read the metadata section of a GGUF file without touching its tensor data.

The reader streams the header and the key/value pairs from anything with a ``read(n)``
method, so it costs the same on a 100 MB file and a 20 GB one, and it also works on a
remote file read through HTTP range requests.
"""

from __future__ import annotations

import io
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import GGUFError

GGUF_MAGIC = b"GGUF"

# GGUF value types (gguf spec, "gguf_type").
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY = range(10)
_UINT64, _INT64, _FLOAT64 = 10, 11, 12

_SCALAR = {
    _UINT8: ("<B", 1), _INT8: ("<b", 1), _UINT16: ("<H", 2), _INT16: ("<h", 2),
    _UINT32: ("<I", 4), _INT32: ("<i", 4), _FLOAT32: ("<f", 4), _BOOL: ("<?", 1),
    _UINT64: ("<Q", 8), _INT64: ("<q", 8), _FLOAT64: ("<d", 8),
}

# Sanity limits so that a corrupt length field fails cleanly instead of allocating gigabytes.
_MAX_STRING = 64 * 1024 * 1024
_MAX_ARRAY = 16 * 1024 * 1024
_MAX_KV = 1_000_000


@dataclass
class GGUFMetadata:
    """The key/value metadata of one GGUF file."""

    source: str
    version: int
    tensor_count: int
    kv: dict[str, Any] = field(default_factory=dict)
    header_bytes: int = 0

    def get(self, key: str, default: Any = None) -> Any:
        return self.kv.get(key, default)

    @property
    def architecture(self) -> str:
        return str(self.kv.get("general.architecture", "unknown"))

    @property
    def name(self) -> str:
        return str(self.kv.get("general.name") or Path(self.source).stem)

    def arch_key(self, suffix: str, default: Any = None) -> Any:
        return self.kv.get(f"{self.architecture}.{suffix}", default)

    @property
    def tokens(self) -> list[str]:
        return self.kv.get("tokenizer.ggml.tokens") or []

    @property
    def chat_template(self) -> str | None:
        return self.kv.get("tokenizer.chat_template")

    @property
    def file_type(self) -> int | None:
        return self.kv.get("general.file_type")


class _Reader:
    """Counts bytes and turns short reads into a clear 'truncated' error."""

    def __init__(self, stream: BinaryIO, source: str):
        self.stream = stream
        self.source = source
        self.offset = 0

    def read(self, n: int) -> bytes:
        data = self.stream.read(n)
        if data is None or len(data) < n:
            raise GGUFError(
                f"{self.source}: file ends early at byte {self.offset + len(data or b'')} "
                "(truncated or still downloading)"
            )
        self.offset += n
        return data

    def scalar(self, vtype: int):
        fmt, size = _SCALAR[vtype]
        return struct.unpack(fmt, self.read(size))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.read(8))[0]

    def string(self) -> str:
        n = self.u64()
        if n > _MAX_STRING:
            raise GGUFError(f"{self.source}: corrupt metadata (string of {n} bytes at byte {self.offset})")
        return self.read(n).decode("utf-8", errors="replace")

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            itype = self.scalar(_UINT32)
            count = self.u64()
            if count > _MAX_ARRAY:
                raise GGUFError(f"{self.source}: corrupt metadata (array of {count} items)")
            if itype == _STRING:
                return [self.string() for _ in range(count)]
            if itype in _SCALAR:
                fmt, size = _SCALAR[itype]
                return list(struct.unpack(f"<{count}{fmt[1:]}", self.read(count * size)))
            if itype == _ARRAY:
                return [self.value(_ARRAY) for _ in range(count)]
            raise GGUFError(f"{self.source}: corrupt metadata (array item type {itype})")
        if vtype in _SCALAR:
            return self.scalar(vtype)
        raise GGUFError(f"{self.source}: corrupt metadata (value type {vtype} at byte {self.offset})")


def read_metadata_stream(stream: BinaryIO, source: str = "<stream>") -> GGUFMetadata:
    """Parse the GGUF header and key/value section from a byte stream."""
    r = _Reader(stream, source)
    head = stream.read(4)
    if head is None or len(head) < 4 or head != GGUF_MAGIC:
        raise GGUFError(f"{source}: not a GGUF file")
    r.offset = 4
    version = r.scalar(_UINT32)
    if version not in (2, 3):
        raise GGUFError(f"{source}: unsupported GGUF version {version} (2 and 3 are supported)")
    tensor_count = r.u64()
    kv_count = r.u64()
    if kv_count > _MAX_KV:
        raise GGUFError(f"{source}: corrupt header ({kv_count} metadata entries)")
    kv: dict[str, Any] = {}
    for _ in range(kv_count):
        key = r.string()
        vtype = r.scalar(_UINT32)
        kv[key] = r.value(vtype)
    return GGUFMetadata(source=source, version=version, tensor_count=tensor_count, kv=kv,
                        header_bytes=r.offset)


def read_metadata(path: str | os.PathLike) -> GGUFMetadata:
    """Read the metadata of a local GGUF file; raise GGUFError with one line on any problem."""
    p = Path(path)
    if not p.exists():
        raise GGUFError(f"{p}: no such file")
    if p.is_dir():
        raise GGUFError(f"{p}: is a directory, not a GGUF file")
    try:
        with open(p, "rb", buffering=0) as raw:
            stream = io.BufferedReader(raw, buffer_size=1 << 20)
            return read_metadata_stream(stream, str(p))
    except PermissionError:
        raise GGUFError(f"{p}: permission denied") from None
    except OSError as exc:
        raise GGUFError(f"{p}: cannot read ({exc.strerror or exc})") from None
