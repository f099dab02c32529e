"""Tokenizer compatibility of a target and a draft, from GGUF metadata alone.

The rules are the ones llama.cpp applies before it will speculate
(``common_speculative_are_compatible``): same vocabulary type, same add-BOS / add-EOS flags
and the same BOS / EOS ids where they are added, vocabulary sizes within 128, and identical
token text for every id from 5 up to the smaller vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .gguf_meta import GGUFMetadata, read_metadata
from .mtp_meta import describe_mtp, mtp_layers

VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5
MAX_LISTED_DIFFERENCES = 5

# Architectures whose memory is (partly) a recurrent state (llama.cpp's llm_arch_is_recurrent /
# llm_arch_is_hybrid): a rejected draft tail cannot simply be cut from it.
RECURRENT_ARCHS = {"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"}
HYBRID_ARCHS = {"jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h",
                "nemotron_h_moe", "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next",
                "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "minimax-01"}


def model_kind(architecture: str) -> str:
    if architecture in RECURRENT_ARCHS:
        return "recurrent"
    if architecture in HYBRID_ARCHS:
        return "hybrid"
    return "transformer"


def memory_note(role: str, architecture: str) -> str | None:
    """What a recurrent or hybrid model means for speculation, in one sentence."""
    kind = model_kind(architecture)
    if kind == "transformer":
        return None
    return (f"{role} is a {kind} model ({architecture}): rejected draft tokens cannot be cut from its "
            "recurrent state, so localspec rolls it back with llama.cpp state snapshots or a saved "
            "checkpoint and decodes the kept tokens again; expect a smaller speed-up than with a "
            "transformer")


# Pre-tokenizers for which llama.cpp turns add_bos on by default in BPE ("gpt2") vocabularies.
_BPE_PRE_WITH_BOS = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                     "midm-2.0", "lfm2", "jina-v5-nano", "tekken", "chameleon"}

# llama.cpp's defaults per vocabulary type: (bos id, eos id, add_bos, add_eos).
_TYPE_DEFAULTS: dict[str, tuple[int | None, int | None, bool, bool]] = {
    "llama": (1, 2, True, False),
    "bert": (101, None, True, False),
    "gpt2": (11, 11, False, False),
    "t5": (None, 1, False, True),
    "rwkv": (None, None, False, False),
    "no_vocab": (None, None, False, False),
    "none": (None, None, False, False),
}


@dataclass
class VocabInfo:
    """What llama.cpp derives from a file's tokenizer metadata."""

    type: str
    pre: str | None
    n_tokens: int
    add_bos: bool
    add_eos: bool
    bos_id: int | None
    eos_id: int | None
    tokens: list[str] = field(repr=False, default_factory=list)

    @classmethod
    def from_metadata(cls, meta: GGUFMetadata) -> VocabInfo:
        vtype = str(meta.get("tokenizer.ggml.model", "none"))
        pre = meta.get("tokenizer.ggml.pre")
        bos, eos, add_bos, add_eos = _TYPE_DEFAULTS.get(vtype, (1, 2, False, False))
        if vtype == "gpt2" and pre in _BPE_PRE_WITH_BOS:
            add_bos = True
        bos = meta.get("tokenizer.ggml.bos_token_id", bos)
        eos = meta.get("tokenizer.ggml.eos_token_id", eos)
        add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", add_bos))
        add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", add_eos))
        tokens = meta.tokens
        return cls(type=vtype, pre=pre, n_tokens=len(tokens), add_bos=add_bos, add_eos=add_eos,
                   bos_id=bos, eos_id=eos, tokens=tokens)


@dataclass
class Rule:
    name: str
    passed: bool
    detail: str


@dataclass
class TokenDifference:
    id: int
    target: str
    draft: str


@dataclass
class CompatReport:
    """The verdict on a pair, with every rule and the first differing token ids."""

    target: str
    draft: str
    rules: list[Rule]
    differences: list[TokenDifference]
    n_different: int
    notes: list[str] = field(default_factory=list)

    @property
    def compatible(self) -> bool:
        return all(r.passed for r in self.rules)

    @property
    def failed(self) -> list[Rule]:
        return [r for r in self.rules if not r.passed]

    def summary(self) -> str:
        """One line: the verdict and the first failing rule."""
        if self.compatible:
            return "compatible: the draft's tokenizer matches the target's"
        first = self.failed[0]
        return f"incompatible pair: {first.name}: {first.detail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "compatible": self.compatible,
            "target": self.target,
            "draft": self.draft,
            "rules": [asdict(r) for r in self.rules],
            "differences": [asdict(d) for d in self.differences],
            "n_different": self.n_different,
            "notes": list(self.notes),
        }

    def render(self) -> str:
        lines = [f"target: {self.target}", f"draft:  {self.draft}"]
        for r in self.rules:
            lines.append(f"  {'PASS' if r.passed else 'FAIL'}  {r.name:<17} {r.detail}")
        for d in self.differences:
            lines.append(f"        id {d.id}: target {d.target!r}  draft {d.draft!r}")
        verdict = "compatible" if self.compatible else "INCOMPATIBLE"
        lines.append(f"verdict: {verdict}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _flag(add: bool, tok: int | None) -> str:
    return f"added, id {tok}" if add else "not added"


def compare_vocabs(t: VocabInfo, d: VocabInfo, target_label: str = "target",
                   draft_label: str = "draft") -> CompatReport:
    """Apply llama.cpp's speculation rules to two vocabularies."""
    rules = [Rule("vocabulary type", t.type == d.type, f"{t.type} / {d.type}")]

    bos_ok = t.add_bos == d.add_bos and (not t.add_bos or t.bos_id == d.bos_id)
    rules.append(Rule("BOS token", bos_ok, f"{_flag(t.add_bos, t.bos_id)} / {_flag(d.add_bos, d.bos_id)}"))
    eos_ok = t.add_eos == d.add_eos and (not t.add_eos or t.eos_id == d.eos_id)
    rules.append(Rule("EOS token", eos_ok, f"{_flag(t.add_eos, t.eos_id)} / {_flag(d.add_eos, d.eos_id)}"))

    diff = abs(t.n_tokens - d.n_tokens)
    rules.append(Rule("vocabulary size", diff <= VOCAB_MAX_SIZE_DIFFERENCE,
                      f"{t.n_tokens} / {d.n_tokens} (difference {diff}, at most "
                      f"{VOCAB_MAX_SIZE_DIFFERENCE})"))

    n_min = min(t.n_tokens, d.n_tokens)
    differences: list[TokenDifference] = []
    n_different = 0
    tt, dt = t.tokens, d.tokens
    for i in range(VOCAB_CHECK_START_TOKEN_ID, n_min):
        if tt[i] != dt[i]:
            n_different += 1
            if len(differences) < MAX_LISTED_DIFFERENCES:
                differences.append(TokenDifference(i, tt[i], dt[i]))
    if n_min <= VOCAB_CHECK_START_TOKEN_ID:
        detail = "no tokens to compare"
    elif n_different:
        detail = (f"{n_different} of ids {VOCAB_CHECK_START_TOKEN_ID}..{n_min - 1} differ, "
                  f"first at id {differences[0].id}")
    else:
        detail = f"ids {VOCAB_CHECK_START_TOKEN_ID}..{n_min - 1} identical"
    rules.append(Rule("token texts", n_different == 0 and n_min > VOCAB_CHECK_START_TOKEN_ID, detail))
    return CompatReport(target_label, draft_label, rules, differences, n_different)


def describe(meta: GGUFMetadata) -> str:
    v = VocabInfo.from_metadata(meta)
    return f"{meta.source} ({meta.name}, {meta.architecture}, {v.type} vocabulary of {v.n_tokens})"


def check_metadata(target: GGUFMetadata, draft: GGUFMetadata) -> CompatReport:
    report = compare_vocabs(VocabInfo.from_metadata(target), VocabInfo.from_metadata(draft),
                            describe(target), describe(draft))
    report.notes = [n for n in (memory_note("target", target.architecture),
                                memory_note("draft", draft.architecture)) if n]
    if mtp_layers(target) > 0:
        report.notes.append(f"target {describe_mtp(target)}")
    return report


def check_files(target_path, draft_path) -> CompatReport:
    """Read both files' metadata (no weights) and compare their tokenizers."""
    return check_metadata(read_metadata(target_path), read_metadata(draft_path))
