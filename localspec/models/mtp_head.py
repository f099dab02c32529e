"""Where a target's multi-token-prediction (MTP) head is, from GGUF metadata alone.

A GGUF carries MTP layers when its ``{arch}.nextn_predict_layers`` is positive. Some repos
embed them in the main file; ggml-org ships them as a separate ``mtp-*.gguf`` holding only
the nextn block, the embeddings and the LM head (llama.cpp's converter names it so). A
pulled repo keeps its files side by side, so a target without embedded layers finds its
head as a sibling ``mtp-*.gguf`` of the same architecture, width, vocabulary size and
``general.basename`` (when both files name one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..engine.gguf_meta import GGUFMetadata, read_metadata
from ..engine.mtp_meta import MTP_PREFIX, is_head_only, mtp_layers
from ..errors import BadInput, GGUFError

MTP_SPEC = "mtp"          # what --draft takes: "mtp" or "mtp:PATH"


@dataclass(frozen=True)
class MtpSource:
    """Where the MTP head of a target is: embedded (``file`` None) or in ``file``."""

    target: str
    file: str | None
    layers: int

    @property
    def embedded(self) -> bool:
        return self.file is None

    def describe(self) -> str:
        return "embedded in the target" if self.embedded else Path(self.file).name


def parse_draft_arg(arg: str | None) -> tuple[bool, str | None]:
    """(is it MTP, the explicit head file) for a --draft value: "mtp" or "mtp:PATH"."""
    if not arg:
        return False, None
    low = arg.lower()
    if low == MTP_SPEC:
        return True, None
    if low.startswith(MTP_SPEC + ":"):
        path = arg[len(MTP_SPEC) + 1:]
        if not path:
            raise BadInput("--draft mtp:PATH needs a path after 'mtp:'")
        return True, path
    return False, None


def _width(meta: GGUFMetadata) -> tuple[str, object, int]:
    return meta.architecture, meta.arch_key("embedding_length"), len(meta.tokens)


def sibling_heads(target: str) -> list[Path]:
    """``mtp-*.gguf`` files next to the target, the best match for its name first."""
    p = Path(target)
    stem = p.stem.lower()

    def shared(c: Path) -> int:
        s = c.stem.lower()[len(MTP_PREFIX):]
        n = 0
        while n < min(len(s), len(stem)) and s[n] == stem[n]:
            n += 1
        return n

    # next to it, or one folder down (some repos keep heads in MTP/)
    found = [c for pattern in (MTP_PREFIX + "*.gguf", "*/" + MTP_PREFIX + "*.gguf") for c in p.parent.glob(pattern)
             if c.is_file() and c.resolve() != p.resolve()]
    return sorted(found, key=lambda c: (-shared(c), c.name))


def check_head(target_meta: GGUFMetadata, head: str) -> GGUFMetadata:
    """Read ``head`` and refuse it (one line) unless it is an MTP head for this target."""
    meta = read_metadata(head)
    check_head_metadata(target_meta, meta, str(head))
    return meta


def locate_mtp(target: str, head: str | None = None) -> MtpSource:
    """The MTP head for ``target``: ``head`` if given, else embedded, else a sibling
    ``mtp-*.gguf``; a one-line BadInput when there is none."""
    tmeta = read_metadata(target)
    if head:
        meta = check_head(tmeta, head)
        return MtpSource(target, str(head), mtp_layers(meta))
    n = mtp_layers(tmeta)
    if n > 0 and not is_head_only(tmeta):
        return MtpSource(target, None, n)
    for cand in sibling_heads(target):
        try:
            meta = check_head(tmeta, str(cand))
        except (BadInput, GGUFError):
            continue
        return MtpSource(target, str(cand), mtp_layers(meta))
    raise BadInput(f"{Path(target).name} has no MTP head: it carries no MTP (nextn) layers and no "
                   f"{MTP_PREFIX}*.gguf lies next to it; give one with --draft mtp:PATH, or use another drafter")


# ---------------------------------------------------------------------------------------
# Pulling: which file of a Hub repo is the target's MTP head


def check_head_metadata(target_meta: GGUFMetadata, meta: GGUFMetadata, label: str) -> None:
    """Refuse (one line) a head that is not an MTP head for this target."""
    if mtp_layers(meta) <= 0:
        raise BadInput(f"{label}: carries no MTP (nextn) layers")
    if _width(meta) != _width(target_meta):
        a, e, v = _width(meta)
        ta, te, tv = _width(target_meta)
        raise BadInput(f"{label}: an MTP head for {a} with n_embd {e} and {v} tokens, "
                       f"not for this target ({ta}, n_embd {te}, {tv} tokens)")
    base, tbase = meta.get("general.basename"), target_meta.get("general.basename")
    if base and tbase and base != tbase:
        raise BadInput(f"{label}: the MTP head of {base}, not of {tbase}")


def pick_head_file(paths: list[str], quant: str | None, target_quant: str | None) -> str | None:
    """The ``mtp-*.gguf`` of a repo listing to fetch: ``quant`` if given, else the target's
    quant, else Q8_0, else the first by name."""
    heads = sorted(p for p in paths if p.rsplit("/", 1)[-1].lower().startswith(MTP_PREFIX) and p.endswith(".gguf"))
    if not heads:
        return None

    def named(q: str | None) -> list[str]:
        if not q:
            return []
        key = q.lower().replace("-", "_")
        return [p for p in heads if key in p.rsplit("/", 1)[-1].lower().replace("-", "_")]

    if quant:
        hits = named(quant)
        if not hits:
            raise BadInput(f"no {quant.upper()} MTP head among {', '.join(heads)}")
        return hits[0]
    for q in (target_quant, "Q8_0"):
        if named(q):
            return named(q)[0]
    return heads[0]


def mtp_catalog_note(model) -> str:
    """What the catalog says about a model's MTP head, before any network access."""
    if model.mtp == "embedded":
        return f"{model.alias} embeds its MTP head in its GGUFs: nothing more to fetch"
    if model.mtp == "separate":
        return (f"{model.alias} ships its MTP head apart ({', '.join(model.mtp_files.values())}): "
                "fetching one next to the target")
    return f"the catalog does not say where {model.alias}'s MTP head is: looking for mtp-*.gguf in its repo"
