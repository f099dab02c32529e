"""The GGUF metadata reader: real files, generated files, and broken ones."""

import pytest

from localspec.engine.gguf_meta import read_metadata
from localspec.errors import GGUFError


def test_reads_generated_model(tiny_target):
    meta = read_metadata(tiny_target)
    assert meta.architecture == "llama"
    assert meta.get("tokenizer.ggml.model") == "gpt2"
    assert meta.tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert meta.arch_key("block_count") == 2
    assert "im_start" in meta.chat_template


def test_reads_smollm2_header_only(smollm2_q4_1):
    meta = read_metadata(smollm2_q4_1)
    assert meta.get("tokenizer.ggml.pre") == "smollm"
    assert len(meta.tokens) == 49152
    assert meta.tensor_count == 272
    # Only the metadata section is read: a small part of the 98 MB file.
    assert meta.header_bytes < 3_000_000 < smollm2_q4_1.stat().st_size


def test_truncated_file(tiny_target, tmp_path):
    data = tiny_target.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:2000])
    with pytest.raises(GGUFError, match="truncated"):
        read_metadata(cut)


def test_not_gguf(tmp_path):
    p = tmp_path / "notes.gguf"
    p.write_text("hello, I am a text file")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_metadata(p)


def test_empty_and_missing(tmp_path):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_metadata(empty)
    with pytest.raises(GGUFError, match="no such file"):
        read_metadata(tmp_path / "missing.gguf")
    with pytest.raises(GGUFError, match="directory"):
        read_metadata(tmp_path)


def test_corrupt_length_field(tiny_target, tmp_path):
    data = bytearray(tiny_target.read_bytes())
    # The first key's length is at offset 24 (magic, version, tensor count, kv count).
    data[24:32] = (2**62).to_bytes(8, "little")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="corrupt"):
        read_metadata(bad)
