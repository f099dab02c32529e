"""RunSpec: everything one generation needs besides its prompt, with one set of defaults and
the only validation of run settings.

Every front end (the CLI's flags, the app's settings form, the bench grid, a server request)
turns its input into a :class:`RunSpec`; :meth:`RunSpec.validate` raises :class:`SpecError`
naming the field, and each front end words that field its own way (``--draft-max``,
"draft max", ``draft_max``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum

from ..errors import BadInput
from .sampling_config import SamplingConfig

LOGPROBS_MAX = 20        # most alternatives a token's log-probabilities come with (OpenAI's top_logprobs limit)
CASCADE_THRESHOLD = 0.8   # a cascade's default mean token probability (calibrate: `localspec tune --cascade`)


class DrafterKind(str, Enum):
    """Where draft tokens come from."""

    MODEL = "model"        # a small model with the target's tokenizer
    NGRAM = "ngram"        # prompt lookup: what followed the last n-gram earlier on
    NGRAM_MODEL = "ngram+model"   # prompt lookup first, the draft model when it finds nothing
    MODELS = "models"      # two draft models, the policy picking one per round
    MTP = "mtp"            # the target's own multi-token-prediction head
    NONE = "none"          # the target alone (the baseline)

    @property
    def label(self) -> str:
        return _LABELS[self]

    @property
    def uses_model(self) -> bool:
        """Whether this drafter needs a draft model loaded."""
        return self in (DrafterKind.MODEL, DrafterKind.NGRAM_MODEL, DrafterKind.MODELS)

    @classmethod
    def parse(cls, value: str | DrafterKind) -> DrafterKind:
        try:
            return cls(value)
        except ValueError:
            raise SpecError("drafter", f"must be one of {', '.join(k.value for k in cls)} (got {value!r})") from None


_LABELS = {DrafterKind.MODEL: "draft model", DrafterKind.NGRAM: "n-gram (prompt lookup)",
           DrafterKind.NGRAM_MODEL: "prompt lookup, then draft model", DrafterKind.NONE: "none (target only)",
           DrafterKind.MTP: "MTP head", DrafterKind.MODELS: "two draft models, switched per stretch"}


class SpecError(BadInput):
    """A run setting out of range. ``field`` is the RunSpec (or SamplingConfig) field name,
    ``problem`` the rest of the sentence ("must be >= 1 (got 0)")."""

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"{field.replace('_', ' ')} {problem}")

    def named(self, label: str) -> str:
        """The message with the field as this front end calls it."""
        return f"{label} {self.problem}"


@dataclass(frozen=True)
class RunSpec:
    """One generation: drafter, drafting, sampling (one object for both models), length, stops."""

    drafter: DrafterKind = DrafterKind.MODEL
    adaptive: bool = True              # False: draft exactly draft_max tokens every round
    draft_max: int = 8
    draft_min: int = 1
    p_min: float | None = None         # None: no confidence cutoff (the policy decides K)
    can_pause: bool = True             # the adaptive policy may stop drafting when it loses
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    grammar: str | None = None         # GBNF (start rule "root") every emitted token must follow
    # Not lossless, opt-in: the draft model answers alone and its answer is returned when its
    # mean token probability is at least this (engine/cascade.py); None: off.
    cascade: float | None = None
    # Each emitted token with the target's log-probability of it and of its this many most
    # likely tokens (Token.logprob, Token.top): full rows of logits are read; None: off.
    logprobs: int | None = None
    # Code completion (llama-server's n_indent): the answer ends before a line, after its
    # first, indented by fewer than this many spaces or tabs; 0: off.
    n_indent: int = 0
    # llama-server's t_max_predict_ms: past this many milliseconds since the first token, the
    # answer ends with the next token holding a new line; 0: off.
    t_max_predict_ms: float = 0.0

    def __post_init__(self):
        # Accept plain strings and lists from callers; the spec itself stays immutable.
        if not isinstance(self.drafter, DrafterKind):
            object.__setattr__(self, "drafter", DrafterKind.parse(self.drafter))
        if not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def speculative(self) -> bool:
        return self.drafter is not DrafterKind.NONE

    def validate(self) -> RunSpec:
        """Raise :class:`SpecError` for the first value out of range; return self."""
        _int_at_least("max_tokens", self.max_tokens, 0)   # (0: the prompt is read, and cached, only)
        _int_at_least("draft_max", self.draft_max, 1)
        _int_at_least("draft_min", self.draft_min, 1)
        if self.draft_min > self.draft_max:
            raise SpecError("draft_min", f"({self.draft_min}) is larger than draft max ({self.draft_max})")
        if self.p_min is not None and not (_finite(self.p_min) and 0.0 <= self.p_min < 1.0):
            raise SpecError("p_min", f"must be in [0, 1) (got {self.p_min})")
        if not all(isinstance(s, str) for s in self.stop):
            raise SpecError("stop", "must be strings")
        if any(s == "" for s in self.stop):
            raise SpecError("stop", "strings must not be empty")
        if self.cascade is not None and not (_finite(self.cascade) and 0.0 < self.cascade <= 1.0):
            raise SpecError("cascade", f"must be a confidence in (0, 1] (got {self.cascade})")
        if self.logprobs is not None:
            _int_at_least("logprobs", self.logprobs, 0)
            if self.logprobs > LOGPROBS_MAX:
                raise SpecError("logprobs", f"must be at most {LOGPROBS_MAX} (got {self.logprobs})")
            if self.cascade is not None:
                raise SpecError("logprobs", "cannot come with a cascade (its answer may be the draft's)")
        _int_at_least("n_indent", self.n_indent, 0)
        if not (_finite(self.t_max_predict_ms) and self.t_max_predict_ms >= 0):
            raise SpecError("t_max_predict_ms", f"must be >= 0 (got {self.t_max_predict_ms!r})")
        if self.grammar is not None and not (isinstance(self.grammar, str) and self.grammar.strip()):
            raise SpecError("grammar", "must be GBNF text (got an empty or non-text value)")
        s = self.sampling
        for name in ("temperature", "draft_temperature"):
            v = getattr(s, name)
            if v is not None and not (_finite(v) and v >= 0):
                raise SpecError(name, f"must be >= 0 (got {v})")
        _int_at_least("top_k", s.top_k, 0, " (0 turns it off)")
        if not (_finite(s.top_p) and 0.0 < s.top_p <= 1.0):
            raise SpecError("top_p", f"must be in (0, 1] (got {s.top_p})")
        if not (_finite(s.min_p) and 0.0 <= s.min_p < 1.0):
            raise SpecError("min_p", f"must be in [0, 1) (got {s.min_p})")
        if s.seed is not None:
            _int_at_least("seed", s.seed, 0)
        if s.infill and s.top_k <= 0:
            raise SpecError("infill", "needs top_k on (it judges the top-k candidates, as llama.cpp's does)")
        if s.infill and self.grammar is not None:
            raise SpecError("infill", "cannot come with a grammar")
        _penalties(s)
        if s.penalized and self.cascade is not None:
            raise SpecError("cascade", "cannot come with a logit bias or penalties (its answer may be the draft's)")
        return self

    @classmethod
    def of(cls, **values) -> RunSpec:
        """A spec from flat values, sampling fields (temperature, top_k...) included."""
        return cls().with_(**values)

    def with_(self, **changes) -> RunSpec:
        """A copy with some fields changed; sampling fields may be given by name too."""
        samp = {k: changes.pop(k) for k in list(changes) if k in _SAMPLING_FIELDS}
        if samp:
            changes["sampling"] = replace(changes.get("sampling", self.sampling), **samp)
        return replace(self, **changes)

    def describe(self) -> str:
        """One line: drafter, K, sampling, length."""
        if not self.speculative:
            drafting = "target only"
        else:
            k = f"adaptive K {self.draft_min}-{self.draft_max}" if self.adaptive else f"fixed K {self.draft_max}"
            drafting = f"{self.drafter.label}, {k}"
        temp = "greedy" if self.sampling.greedy else f"temp {self.sampling.temperature:g}"
        if self.sampling.penalized:
            temp += " · logit bias/penalties"
        cascade = f" · cascade at {self.cascade:g} (answers may be the draft's)" if self.cascade is not None else ""
        return f"{drafting} · {temp} · max {self.max_tokens} tokens{cascade}"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["drafter"] = self.drafter.value
        out["stop"] = list(self.stop)
        out["sampling"] = self.sampling.to_dict()
        return out


_SAMPLING_FIELDS = {f.name for f in fields(SamplingConfig)}


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _penalties(s: SamplingConfig) -> None:
    """llama.cpp's ranges for its logit bias and penalties samplers."""
    if not (_finite(s.repeat_penalty) and s.repeat_penalty > 0):
        raise SpecError("repeat_penalty", f"must be > 0 (1 turns it off; got {s.repeat_penalty!r})")
    _int_at_least("repeat_last_n", s.repeat_last_n, -1, " (-1: the whole context, 0: off)")
    for name in ("frequency_penalty", "presence_penalty"):
        if not _finite(getattr(s, name)):
            raise SpecError(name, f"must be a number (got {getattr(s, name)!r})")
    if not (_finite(s.dry_multiplier) and s.dry_multiplier >= 0):
        raise SpecError("dry_multiplier", f"must be >= 0 (0 turns DRY off; got {s.dry_multiplier!r})")
    if not (_finite(s.dry_base) and s.dry_base >= 1):
        raise SpecError("dry_base", f"must be >= 1 (got {s.dry_base!r})")
    _int_at_least("dry_allowed_length", s.dry_allowed_length, 0)
    _int_at_least("dry_penalty_last_n", s.dry_penalty_last_n, -1, " (-1: the whole context, 0: off)")
    if not (isinstance(s.dry_sequence_breakers, tuple) and all(isinstance(b, str) for b in s.dry_sequence_breakers)):
        raise SpecError("dry_sequence_breakers", f"must be a list of strings (got {s.dry_sequence_breakers!r})")
    for pair in s.logit_bias:
        ok = isinstance(pair, tuple) and len(pair) == 2
        if not (ok and isinstance(pair[0], int) and not isinstance(pair[0], bool) and pair[0] >= 0
                and isinstance(pair[1], (int, float)) and not isinstance(pair[1], bool)
                and (_finite(pair[1]) or pair[1] == -math.inf)):
            raise SpecError("logit_bias", f"takes (token id, bias) pairs, a bias a number or -inf (got {pair!r})")


def _int_at_least(name: str, value, low: int, hint: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(name, f"must be a whole number (got {value!r})")
    if value < low:
        bound = f"at least {low}" if low > 0 else f">= {low}"
        raise SpecError(name, f"must be {bound} (got {value}{'; ' + hint.strip(' ()') if hint else ''})")
