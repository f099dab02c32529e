"""The chat core: which models, the loaded engine, the conversation. No textual here.

The app drives a :class:`ChatSession` from worker threads (loading, generating) and reads
plain data back (:class:`ModelSummary`), so the UI never touches llama.cpp objects and the
core can be tested without a terminal.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from ..engine import DrafterKind, Engine, EngineConfig, RunSpec, rollback_depth
from ..errors import BadInput, LocalspecError
from .fit import answer_room, fit_conversation
from .reasoning import prompt_opens_thinking, split_reasoning
from .settings import CHAT_DEFAULTS, validate

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ModelChoice:
    """The models to chat with, and how to load them."""

    target: str | None = None        # a .gguf path; None with demo
    draft: str | None = None
    demo: bool = False               # the built-in SmolLM2 pair, prepared on first use
    n_ctx: int = 4096
    threads: int | None = None
    gpu_layers: int | None = None
    gpu_layers_draft: int | None = None
    cache_type: str = "f16"
    target_name: str | None = None   # how the user knows them (store names), for display
    draft_name: str | None = None
    mtp_file: str | None = None      # the target's MTP head file (--draft mtp:PATH); None: find it
    draft2: str | None = None        # a second draft model (drafter "models")
    rpc: tuple[str, ...] = ()        # RPC workers for the target's layers (EngineConfig.rpc)
    rpc_draft: bool = False
    tensor_split: tuple[float, ...] | None = None

    def label(self) -> str:
        if self.demo:
            return "demo pair (SmolLM2-135M-Instruct F16 + Q4_1)"
        t = self.target_name or (Path(self.target).name if self.target else "?")
        if self.draft:
            extra = f" + {Path(self.draft2).name}" if self.draft2 else ""
            return f"{t} + {self.draft_name or Path(self.draft).name}{extra}"
        return t


@dataclass(frozen=True)
class ModelCard:
    """What the model panel shows about one loaded model."""

    role: str
    name: str
    description: str
    quant: str
    size_bytes: int
    n_params: int
    n_layer: int
    gpu_layers: int
    backend: str
    path: str
    devices: str = ""    # which devices hold which layers, when some are on RPC workers


def device_layout(info) -> str:
    """ "RPC0 127.0.0.1:50052 0-11 · RPC1 10.0.0.2:50052 12-23,output" ("" when all is local)."""
    return " · ".join(f"{dev} {info.endpoints.get(dev) or 'here'} {layers}" for dev, layers in info.layers.items())


@dataclass(frozen=True)
class ModelSummary:
    target: ModelCard
    draft: ModelCard | None
    drafter: str
    compat: str                      # the tokenizer verdict, one line
    compatible: bool | None          # None: no draft model to check
    n_ctx: int
    threads: int
    mtp: str | None = None           # where the MTP head is, when the drafter is MTP
    draft2: ModelCard | None = None  # the second draft model, when two are loaded


_FTYPE_NAMES: dict[int, str] | None = None


def quant_of(path: str, description: str = "") -> str:
    """The quantization of a GGUF file from its metadata (F16, Q4_K_M, ...)."""
    global _FTYPE_NAMES
    if _FTYPE_NAMES is None:
        from ..models.quantize import FTYPES

        _FTYPE_NAMES = {v: k for k, v in FTYPES.items()}
    try:
        from ..engine.gguf_meta import read_metadata

        ftype = read_metadata(path).file_type
    except (LocalspecError, OSError):
        ftype = None
    if ftype is not None and ftype in _FTYPE_NAMES:
        return _FTYPE_NAMES[ftype]
    # llama.cpp's own description: "llama 1B Q4_K - Medium", "llama 135M Q8_0", "llama ?B all F32"
    m = re.search(r"\b(I?Q\d\w*?)(?: - (Small|Medium|Large))?$", description or "")
    if m:
        return m.group(1) + (f"_{m.group(2)[0]}" if m.group(2) else "")
    return description.split()[-1] if description else "?"


def _store_names() -> dict[str, str]:
    try:
        from ..models.store import Store

        return {str(Path(m.path)): m.name for m in Store().models()}
    except (LocalspecError, OSError):
        return {}


def card(role: str, model, name: str | None = None) -> ModelCard:
    info = model.info
    return ModelCard(role=role, name=name or Path(info.path).name, description=info.description,
                     quant=quant_of(info.path, info.description), size_bytes=info.size_bytes,
                     n_params=info.n_params, n_layer=info.n_layer, gpu_layers=info.gpu_layers,
                     backend=info.backend, path=info.path, devices=device_layout(info))


class ChatSession:
    """Models, settings and conversation of one chat; the engine it loads lives here."""

    def __init__(self, choice: ModelChoice, settings: RunSpec | None = None, *,
                 system: str | None = None, variables: dict | None = None,
                 engine_factory: Callable[[EngineConfig], Engine] = Engine, demo_pair: Callable | None = None):
        self.choice = choice
        self.settings = settings or CHAT_DEFAULTS
        self.system = system
        self.messages: list[dict] = []
        self.left_out = 0                  # the oldest messages the last prompt left out (no room)
        self.variables = variables         # more for the chat template (e.g. enable_thinking)
        self.thinking = False              # the last prompt opened a <think> block
        self.engine: Engine | None = None
        self.summary: ModelSummary | None = None
        self._factory = engine_factory
        self._demo_pair = demo_pair
        self.resolved: ModelChoice | None = None   # the choice with paths, once loaded
        self._lock = threading.Lock()

    # -- models -----------------------------------------------------------------------
    def resolve(self, progress: Progress | None = None) -> ModelChoice:
        """Turn a demo choice into paths (making the demo's F16 target the first time)."""
        if not self.choice.demo:
            return self.choice
        pair = self._demo_pair
        if pair is None:
            from ..models.demo import demo_pair as pair
        target, draft = pair(progress=progress)
        return replace(self.choice, target=str(target), draft=str(draft),
                       target_name="SmolLM2-135M F16 (demo)",
                       draft_name="SmolLM2-135M Q4_1 (demo)")

    def load(self, progress: Progress | None = None) -> ModelSummary:
        """Load (or reload) the engine for the current choice and drafter. Blocking."""
        with self._lock:
            choice = self.resolve(progress)
            if not choice.target:
                raise BadInput("no target model: pick a pair in the models screen")
            drafter = self.settings.drafter
            if drafter.uses_model and not choice.draft:
                raise BadInput("this choice has no draft model: pick a pair in the models screen, "
                               "or choose n-gram or no drafting in the settings")
            if drafter is DrafterKind.MODELS and not choice.draft2:
                raise BadInput("two draft models are needed: start `localspec chat TARGET -d SMALL -d LARGE`")
            head = self.mtp_source(choice) if drafter is DrafterKind.MTP else None
            config = EngineConfig(
                target=choice.target, draft=choice.draft if drafter.uses_model else None,
                draft2=choice.draft2 if drafter.uses_model else None,
                mtp=head is not None, mtp_file=head.file if head is not None else None,
                n_ctx=choice.n_ctx, threads=choice.threads, gpu_layers=choice.gpu_layers,
                gpu_layers_draft=choice.gpu_layers_draft, cache_type=choice.cache_type,
                rollback_depth=rollback_depth(self.settings), rpc=choice.rpc, rpc_draft=choice.rpc_draft,
                tensor_split=choice.tensor_split)
            if progress:
                progress(f"loading {choice.label()}...")
            self._close_engine()
            engine = self._factory(config)
            self.engine = engine
            self.resolved = choice
            self.summary = self._summarise(engine, choice, drafter)
            return self.summary

    def _summarise(self, engine, choice: ModelChoice, drafter: DrafterKind) -> ModelSummary:
        names = _store_names()
        t_name = choice.target_name or names.get(str(Path(choice.target)))
        target = card("target", engine.target_model, t_name)
        draft = None
        if getattr(engine, "draft_model", None) is not None:
            d_name = choice.draft_name or names.get(str(Path(choice.draft)))
            draft = card("draft", engine.draft_model, d_name)
        draft2 = None
        if getattr(engine, "draft2_model", None) is not None:
            draft2 = card("draft 2", engine.draft2_model, names.get(str(Path(choice.draft2))))
        report = getattr(engine, "compat", None)
        if report is not None:
            compat, ok = report.summary(), report.compatible
        elif drafter is DrafterKind.NGRAM:
            compat, ok = "n-gram drafting: no draft model, nothing to check", None
        elif drafter is DrafterKind.MTP:
            compat, ok = "MTP head: the target's own tokens, nothing to check", None
        else:
            compat, ok = "target only: no draft model, nothing to check", None
        desc = engine.describe()
        mtp = desc.get("mtp")
        head = None if mtp is None else ("embedded in the target" if mtp["embedded"] else Path(mtp["path"]).name)
        return ModelSummary(target=target, draft=draft, drafter=drafter.value, compat=compat, compatible=ok,
                            n_ctx=int(desc.get("n_ctx", choice.n_ctx)), threads=int(desc.get("threads", 0)),
                            mtp=head, draft2=draft2)

    def mtp_source(self, choice: ModelChoice | None = None):
        """Where the target's MTP head is (a one-line BadInput when it has none)."""
        from ..models.mtp_head import locate_mtp

        choice = choice or self.choice
        if choice.demo or not choice.target:
            raise BadInput("the demo pair (SmolLM2) has no MTP head: pick a target with MTP layers")
        return locate_mtp(choice.target, choice.mtp_file)

    def has_mtp(self) -> bool:
        """Whether drafter 'mtp' can run on the chosen target."""
        try:
            self.mtp_source()
        except LocalspecError:
            return False
        return True

    def needs_reload(self, settings: RunSpec) -> bool:
        """Whether new settings need the engine rebuilt (a draft model not loaded yet)."""
        return self.engine is None or settings.drafter not in self.engine.drafters

    def check_settings(self, settings: RunSpec) -> None:
        """Refuse settings the current models cannot honour."""
        validate(settings)
        if settings.drafter.uses_model and not (self.choice.draft or self.choice.demo):
            raise BadInput(f"drafter '{settings.drafter.value}' needs a draft model: pick a pair in the models screen")
        if settings.drafter is DrafterKind.MTP:
            self.mtp_source()

    def use(self, settings: RunSpec) -> None:
        """Generate with these settings from the next message on."""
        self.settings = settings
        if self.summary is not None and not self.needs_reload(settings):
            self.summary = replace(self.summary, drafter=settings.drafter.value)

    def set_choice(self, choice: ModelChoice) -> None:
        self.choice = choice
        self.messages.clear()

    @property
    def thinking_allowed(self) -> bool:
        """Whether a thinking model may think (no ``enable_thinking: false`` for the template)."""
        return (self.variables or {}).get("enable_thinking", True) is not False

    def allow_thinking(self, on: bool) -> None:
        """Let a thinking model think, or turn it off through the template's ``enable_thinking``."""
        variables = {k: v for k, v in (self.variables or {}).items() if k != "enable_thinking"}
        if not on:
            variables["enable_thinking"] = False
        self.variables = variables or None

    @property
    def loaded(self) -> bool:
        return self.engine is not None

    # -- conversation -----------------------------------------------------------------
    def new_chat(self) -> None:
        self.messages.clear()
        self.left_out = 0

    def _chat(self, messages: list[dict] | None = None) -> list[dict]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + (self.messages if messages is None else messages)

    def prompt_tokens(self, text: str) -> list[int]:
        """The tokens of a one-message chat (the system prompt and ``text``), outside the
        conversation: what the comparison screen runs."""
        if self.engine is None:
            raise BadInput("no model is loaded yet")
        return self.engine.chat_prompt(self._chat([{"role": "user", "content": text}]), self.variables)

    def begin_turn(self, text: str) -> list[int]:
        """Add the user's message and return the prompt tokens: the whole conversation, or,
        once it outgrows the context, its newest turns (:mod:`.fit`; ``left_out`` counts the
        messages left out, which stay in ``messages``)."""
        if self.engine is None:
            raise BadInput("no model is loaded yet")
        self.messages.append({"role": "user", "content": text})
        n_ctx = self.summary.n_ctx if self.summary is not None else self.choice.n_ctx
        try:
            fitted = fit_conversation(lambda msgs: self.engine.chat_prompt(msgs, self.variables), self._chat(),
                                      n_ctx, answer_room(n_ctx, self.settings.max_tokens))
        except Exception:
            self.messages.pop()
            raise
        self.left_out = fitted.left_out
        self.thinking = prompt_opens_thinking(self.engine.target_model, fitted.tokens)
        return fitted.tokens

    def end_turn(self, answer: str) -> None:
        """Keep the answer: its reply as the content and a thinking model's reasoning as
        ``reasoning_content`` (where chat templates that take it back look for it)."""
        reasoning, reply = split_reasoning(answer, self.thinking)
        message = {"role": "assistant", "content": reply}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        self.messages.append(message)

    def retract_turn(self) -> str | None:
        """Take back the last turn (the user's message and its answer) to answer it again;
        return the message (None: no answered message to take back)."""
        if len(self.messages) < 2 or self.messages[-1]["role"] != "assistant" or self.messages[-2]["role"] != "user":
            return None
        self.messages.pop()
        return self.messages.pop()["content"]

    def abandon_turn(self) -> None:
        """Drop the last user message (its answer failed before any text)."""
        if self.messages and self.messages[-1]["role"] == "user":
            self.messages.pop()

    def last_answer(self) -> str | None:
        for m in reversed(self.messages):
            if m["role"] == "assistant":
                return m["content"]
        return None

    # -- generation -------------------------------------------------------------------
    def stream(self, tokens: list[int], settings: RunSpec, cancel: threading.Event,
               *, speculative: bool = True) -> Iterator:
        """Engine events for one generation with these settings (``speculative=False``: the
        target alone, the rest of the settings unchanged)."""
        engine = self.engine
        if engine is None:
            raise BadInput("no model is loaded yet")
        spec = settings if speculative else settings.with_(drafter=DrafterKind.NONE)
        return engine.run(tokens, spec, cancel)

    def _close_engine(self) -> None:
        if self.engine is not None:
            engine, self.engine = self.engine, None
            self.summary = None
            engine.close()

    def close(self) -> None:
        with self._lock:
            self._close_engine()

