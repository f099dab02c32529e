"""A GGUF's multi-token-prediction (MTP) layers, from its metadata alone.

A GGUF carries MTP (nextn) layers when its ``{arch}.nextn_predict_layers`` is positive, in
the main file or in a separate ``mtp-*.gguf`` holding only them (llama.cpp's converter names
it so). :mod:`localspec.models.mtp_head` finds a target's head from these facts.
"""

from __future__ import annotations

from pathlib import Path

from .gguf_meta import GGUFMetadata

MTP_PREFIX = "mtp-"


def mtp_layers(meta: GGUFMetadata) -> int:
    """How many MTP (nextn) layers the file's metadata declares."""
    try:
        return int(meta.arch_key("nextn_predict_layers", 0) or 0)
    except (TypeError, ValueError):
        return 0


def is_head_only(meta: GGUFMetadata) -> bool:
    """An ``mtp-*.gguf``: MTP layers without the trunk (a handful of tensors for many blocks)."""
    n = mtp_layers(meta)
    blocks = int(meta.arch_key("block_count", 0) or 0)
    return n > 0 and (Path(meta.source).name.startswith(MTP_PREFIX) or meta.tensor_count < 4 * blocks)


def describe_mtp(meta: GGUFMetadata) -> str:
    """One sentence for `localspec check` about the file's MTP layers."""
    n = mtp_layers(meta)
    if n <= 0:
        return "no MTP (nextn) layers"
    what = "an MTP head file" if is_head_only(meta) else "carries an embedded MTP head"
    return f"{what} ({n} nextn layer{'s' if n != 1 else ''}): `--draft mtp` drafts with it"
