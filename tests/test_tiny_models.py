"""The tiny-model package (tests/tiny/): one spec for every architecture, one writer, one zoo.
Files are read back with the ``gguf`` package; loading them in llama.cpp is what the engine
tests (test_tiny_recurrent, test_qwen35, test_hybrid...) do."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from tiny import ARCHS, TinySpec, TinyZoo, qwen35_spec, split_paths, write_model


def header(path) -> tuple[dict, dict]:
    """(metadata scalars by key, tensors by name) of a GGUF file."""
    r = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.") and len(f.data) == 1}
    return meta, {t.name: np.asarray(t.data) for t in r.tensors}


@pytest.mark.parametrize("arch", ARCHS)
def test_one_writer_writes_every_architecture(tmp_path, arch):
    meta, tensors = header(write_model(tmp_path / f"{arch}.gguf", TinySpec(arch=arch)))
    assert meta["general.architecture"] == arch
    assert meta["general.name"] == ("tiny" if arch == "llama" else f"tiny-{arch}")
    assert meta[f"{arch}.block_count"] == (4 if arch == "qwen35" else 2)
    assert meta[f"{arch}.context_length"] == (4096 if arch == "qwen35" else 2048)
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.eos_token_id"] == 2
    assert tensors["token_embd.weight"].shape[0] == len(tensors["output.weight"])
    assert not tensors["output.weight"][0].any()        # <|endoftext|> never wins


def test_a_split_qwen35_shares_its_weights_with_the_whole(tmp_path):
    spec = qwen35_spec(mtp=True, bigram_seed=5, layer_gain=0.05)
    _, whole = header(write_model(tmp_path / "whole.gguf", spec))
    trunk, head = split_paths(tmp_path, spec, "q35")
    assert head.name == "mtp-q35.gguf"
    (trunk_meta, trunk_t), (head_meta, head_t) = header(trunk), header(head)
    assert trunk_meta["qwen35.block_count"] == 4 and head_meta["qwen35.block_count"] == 5
    assert head_meta["general.name"] == "tiny-qwen35-mtp"
    assert set(trunk_t) | set(head_t) == set(whole)
    assert set(trunk_t) & set(head_t) == {"token_embd.weight", "output_norm.weight", "output.weight"}
    assert all(np.array_equal(t, whole[name]) for part in (trunk_t, head_t) for name, t in part.items())


def test_specs_refuse_what_no_model_is():
    with pytest.raises(ValueError, match="unknown arch 'gpt9'"):
        TinySpec(arch="gpt9")
    with pytest.raises(ValueError, match="split a model that has an MTP block"):
        qwen35_spec(part="trunk")
    with pytest.raises(ValueError, match="one attention layer and one convolution layer"):
        TinySpec(arch="lfm2", attn_layers=(0, 1))


def test_the_zoo_writes_each_spec_once_and_never_over_another(tmp_path):
    zoo = TinyZoo(tmp_path)
    first = zoo.get(TinySpec(), "m.gguf")
    stamp = first.stat().st_mtime_ns
    assert zoo.get(TinySpec(), "other.gguf") == first and first.stat().st_mtime_ns == stamp
    second = zoo.get(TinySpec(noise=0.1), "m.gguf")       # the name is taken: a sibling
    assert second == tmp_path / "m-2.gguf"
    assert header(first)[1]["output.weight"].tobytes() != header(second)[1]["output.weight"].tobytes()
