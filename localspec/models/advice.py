"""Which drafts suit a target, and why: the rules of thumb of speculative decoding.

A draft must share the target's tokenizer (its family in the catalog; ``localspec check``
for two files). Of those, one of about 1/10 to 1/20 of the target's parameters usually
drafts fastest: a larger one is accepted more often but each of its tokens costs more, a
smaller one is cheap but accepted less. Its quantization barely matters (Q8_0 costs a point
or two of acceptance). A target with an MTP head drafts with no second model at all.
These are starting points: ``localspec tune -m TARGET -d A -d B`` measures candidates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..engine.gguf_meta import read_metadata
from .catalog import SIZE_RE, Catalog, CatalogModel, size_in_billions

BAND = (1 / 20, 1 / 10)     # a draft's share of the target's parameters that usually suits
_MIDDLE = math.sqrt(BAND[0] * BAND[1])


@dataclass(frozen=True)
class DraftAdvice:
    """One candidate draft for a target."""

    alias: str
    size: str
    ratio: float            # the draft's parameters over the target's
    suits: bool
    why: str

    def to_dict(self) -> dict:
        return {"alias": self.alias, "size": self.size, "ratio": round(self.ratio, 4), "suits": self.suits,
                "why": self.why}


def judge_ratio(ratio: float) -> tuple[bool, str]:
    """(suits, why) for a draft of ``ratio`` times the target's parameters."""
    share = f"1/{1 / ratio:.0f} of the target's parameters" if ratio < 1 else f"{ratio:.1f}x the target's parameters"
    if ratio >= 1:
        return False, f"{share}: no faster than the target, drafting cannot pay"
    if ratio > 1 / 4:
        return False, f"{share}: each draft token costs too much of a target step"
    if ratio > BAND[1]:
        return False, (f"{share}: accepted more often, but dearer than the usual 1/10-1/20; can pay on a GPU "
                       "where the target is memory-bound")
    if ratio >= BAND[0]:
        return True, f"{share}: in the usual 1/10-1/20 band"
    return False, f"{share}: cheap, but smaller than 1/20 is accepted less often"


def for_catalog(cat: Catalog, target: CatalogModel) -> list[DraftAdvice]:
    """Every smaller model of the target's tokenizer family, the suitable ones first (nearest
    the middle of the band first)."""
    out = []
    for m in cat.family_members(target.family):
        if m.alias == target.alias or m.billions >= target.billions:
            continue
        ratio = m.billions / target.billions
        suits, why = judge_ratio(ratio)
        out.append(DraftAdvice(m.alias, m.size, ratio, suits, f"same tokenizer family; {why}"))
    return sorted(out, key=lambda a: (not a.suits, abs(math.log(a.ratio / _MIDDLE))))


def mtp_note(target: CatalogModel) -> str | None:
    """A line about the target's MTP head, when the catalog knows it has one."""
    if target.mtp is None:
        return None
    where = "in its own GGUFs" if target.mtp == "embedded" else "in an mtp-*.gguf beside them"
    return (f"{target.alias} has an MTP head ({where}): `--draft mtp` drafts with no second model; "
            "try it first, then a draft model")


def lines(cat: Catalog, target: CatalogModel) -> list[str]:
    """What ``pull`` and ``list --catalog`` say about a target's drafts."""
    out = []
    note = mtp_note(target)
    if note:
        out.append(note)
    advice = for_catalog(cat, target)
    suited = [a for a in advice if a.suits]
    if not advice:
        out.append(f"{target.alias} has no smaller model in its tokenizer family to draft with")
    for a in (suited or advice[:2]):
        out.append(f"draft {a.alias} ({a.size}): {a.why}")
    if not suited and advice:
        out.append("none of its family is in the 1/10-1/20 band; the nearest are above")
    out.append("a draft's quantization barely matters (Q8_0 costs a point or two of acceptance)")
    return out


def params_of(path: str | Path) -> float | None:
    """A GGUF's parameters in billions from its metadata: its size label, else estimated from
    its shape (12 n_layer n_embd^2 + n_vocab n_embd). None when neither is there."""
    meta = read_metadata(path)
    label = (meta.get("general.size_label") or "").strip().lower()
    if SIZE_RE.match(label):
        return size_in_billions(label)
    n_embd, n_layer = meta.arch_key("embedding_length"), meta.arch_key("block_count")
    if not (isinstance(n_embd, int) and isinstance(n_layer, int)):
        return None
    n_vocab = len(meta.get("tokenizer.ggml.tokens") or ())
    return (12 * n_layer * n_embd * n_embd + n_vocab * n_embd) / 1e9


def for_files(target: str | Path, draft: str | Path) -> tuple[bool, str] | None:
    """(suits, why) for two GGUF files by their parameters; None when unknown."""
    t, d = params_of(target), params_of(draft)
    if not t or not d:
        return None
    return judge_ratio(d / t)
