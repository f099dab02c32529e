"""The typed events a generation emits. Consumers (CLI, TUI, benchmarks) read only these."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum


class Origin(str, Enum):
    """Where an emitted token came from."""

    DRAFT = "draft"        # proposed by the drafter and accepted by the target
    TARGET = "target"      # the target's own token after a rejection (or with no draft)
    BONUS = "bonus"        # the target's extra token after every draft token was accepted


class StopReason(str, Enum):
    EOG = "eog"                  # an end-of-generation token of the target vocabulary
    MAX_TOKENS = "max_tokens"
    STOP_STRING = "stop_string"
    INDENT = "indent"            # a line indented less than RunSpec.n_indent (code completion)
    TIME_LIMIT = "time_limit"    # a new line after RunSpec.t_max_predict_ms of generation
    CONTEXT_FULL = "context_full"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class PromptProcessed:
    n_tokens: int        # prompt length
    n_cached: int        # tokens reused from the previous generation's cache
    seconds: float


@dataclass(slots=True)
class Token:
    """One generated token (not frozen, like :class:`Step`: one is built per token, and a
    frozen dataclass costs several times as much to build)."""

    id: int
    text: str            # text released by this token (may be "" while a stop string is pending)
    origin: Origin
    # With RunSpec.logprobs: the target's log-probability of this token (its logits' log-softmax,
    # before any sampling setting), and its most likely tokens' as (id, logprob), best first.
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] | None = None


@dataclass(frozen=True, slots=True)
class TextChunk:
    """Text released without a new token: what was held back for a stop string at the end."""

    text: str


@dataclass(slots=True)
class Step:
    """One draft-and-verify round (or one plain target step when nothing was drafted).

    The one record of a round: the stream's consumers, the statistics and the drafting
    policy all read it (and none changes it; not frozen, as one is built per slot per round
    and a frozen dataclass costs several times as much to build).
    """

    index: int
    k: int               # the most drafts the policy allowed this round
    drafted: int
    accepted: int
    emitted: int
    draft_seconds: float
    verify_seconds: float
    drafting: bool       # False while the policy has drafting paused
    draft_steps: int = 0         # drafter decodes, its catch-up decode included
    verify_batch: int = 1        # positions in the target's verify decode
    probe: bool = False          # a short draft tried while drafting was paused
    sync_tokens: int = 0         # tokens the drafter's first (catch-up) decode took
    sync_seconds: float = 0.0
    confidence: tuple[float, ...] = ()   # the draft's top probability at each drafted position
    source: str = ""             # which drafter of a chain drafted this round ("": the only one)
    wait_seconds: float = 0.0    # of sync_seconds, the drafter's wait for a read alongside
    scored: str = ""             # the idle one of two drafts, scored on the tokens it missed
    scored_hits: tuple[bool, ...] = ()   # ... whether it predicted each of them
    score_seconds: float = 0.0   # ... the time that took
    # A layered round of two drafts: the small one's blocks, (proposed, agreed with the large one).
    helper_blocks: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class PolicyNote:
    """The drafting policy changed its mind; ``reason`` says why in plain words."""

    drafting: bool
    k: int
    reason: str


@dataclass
class Summary:
    n_prompt: int = 0
    n_cached: int = 0
    n_generated: int = 0
    prompt_seconds: float = 0.0
    generation_seconds: float = 0.0
    time_to_first_token: float = 0.0
    tokens_per_second: float = 0.0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    acceptance_rate: float = 0.0
    mean_accepted_length: float = 0.0   # accepted draft tokens per round that drafted
    tokens_per_step: float = 0.0
    acceptance_by_position: list[float] = field(default_factory=list)
    # Per drafter that drafted (a chain's "ngram" and "model", two drafts' "small" and "large"):
    # {"drafted": tokens, "accepted": tokens, "rounds": rounds}.
    by_drafter: dict[str, dict[str, int]] = field(default_factory=dict)
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    decode_seconds: float = 0.0          # time inside llama_decode (both models)
    overhead_fraction: float = 0.0       # share of generation time spent outside llama_decode
    tokens_drafting_on: int = 0
    tokens_drafting_off: int = 0
    pauses: int = 0                      # times the policy turned drafting off
    probes: int = 0                      # short drafts tried while paused
    policy: str = ""                     # the policy and its latest reasoning
    policy_notes: list[str] = field(default_factory=list)  # each on/off decision, with why
    # Recurrent / hybrid models cannot cut rejected tokens from their state: how it was done.
    target_memory: str = ""              # "kv" (KV cache), "rs" (state snapshots), "checkpoint"
    draft_memory: str = ""
    checkpoints: int = 0                 # sequence states saved (target and draft)
    checkpoint_bytes: int = 0            # bytes those saves copied
    checkpoint_size: int = 0             # bytes of one checkpoint
    checkpoint_seconds: float = 0.0      # time spent saving and restoring states
    rollbacks: int = 0                   # tails removed by a snapshot or a checkpoint
    restarts: int = 0                    # sequences decoded again from the start
    redecoded_tokens: int = 0            # accepted tokens the target decoded a second time
    stop_reason: str = ""
    # With a cascade (RunSpec.cascade): "draft" (the draft model's answer, not the target's) or
    # "target"; "" without one. The draft's confidence (mean token probability) and the time its
    # answer took (counted in generation_seconds either way).
    answered_by: str = ""
    cascade_confidence: float | None = None
    cascade_seconds: float = 0.0
    drafter: str = ""
    k_max: int = 0
    seed: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Done:
    summary: Summary
    text: str
    token_ids: tuple[int, ...]
    stop_reason: StopReason
    message: str = ""    # a sentence for the user when the stop needs explaining
    policy: dict = field(default_factory=dict)   # the policy's estimates and decisions at the end


Event = PromptProcessed | Token | TextChunk | Step | PolicyNote | Done
