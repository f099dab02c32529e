"""Load a target and a drafter from GGUF paths and generate with them.

:class:`Engine` owns the models and contexts; every generation goes through the same
:class:`~localspec.engine.generator.Generator` loop, so the target-only baseline and the
speculative run differ only in their drafter and policy.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..compat import check_files
from ..errors import BadInput, IncompatiblePair
from .backend import Context, Model, default_threads
from .chat import chat_tokens
from .drafters import ModelDrafter, NgramDrafter, NoDrafter
from .events import Event
from .generator import Generator
from .policy import AdaptivePolicy, FixedPolicy
from .sampling import SamplingConfig

DRAFTERS = ("model", "ngram", "none")


@dataclass
class DraftSettings:
    """How drafting is driven: K bounds, confidence cutoff, adaptive or fixed."""

    draft_max: int = 8
    draft_min: int = 1
    p_min: float | None = None      # None: the adaptive policy's cost-based stop rule
    fixed_k: bool = False
    can_pause: bool = True

    def validate(self) -> None:
        if self.draft_max <= 0:
            raise BadInput(f"--draft-max must be >= 1 (got {self.draft_max})")
        if self.draft_min <= 0:
            raise BadInput(f"--draft-min must be >= 1 (got {self.draft_min})")
        if self.draft_min > self.draft_max:
            raise BadInput(f"--draft-min ({self.draft_min}) is larger than --draft-max ({self.draft_max})")
        if self.p_min is not None and not 0.0 <= self.p_min < 1.0:
            raise BadInput(f"--p-min must be in [0, 1) (got {self.p_min})")

    def policy(self):
        if self.fixed_k:
            return FixedPolicy(self.draft_max, self.p_min)
        return AdaptivePolicy(self.draft_min, self.draft_max, self.p_min, can_pause=self.can_pause)


@dataclass
class EngineConfig:
    target: str
    draft: str | None = None
    drafter: str = "model"          # model | ngram | none
    n_ctx: int = 4096
    threads: int | None = None
    gpu_layers: int | None = None   # None: all layers on the GPU when offload is supported
    gpu_layers_draft: int | None = None
    cache_type: str = "f16"
    n_batch: int = 512
    drafting: DraftSettings = field(default_factory=DraftSettings)
    # Recurrent-state snapshots kept for rollback (recurrent/hybrid targets whose architecture
    # supports them); None: draft_max + 1; 0: always use sequence checkpoints instead.
    rollback_depth: int | None = None

    def validate(self) -> None:
        if self.drafter not in DRAFTERS:
            raise BadInput(f"unknown drafter {self.drafter!r} (one of {', '.join(DRAFTERS)})")
        if self.drafter == "model" and not self.draft:
            raise BadInput("a draft model is needed (-d DRAFT), or use --ngram or --no-draft")
        if self.n_ctx < 16:
            raise BadInput(f"--ctx must be at least 16 (got {self.n_ctx})")
        if self.threads is not None and self.threads <= 0:
            raise BadInput(f"--threads must be >= 1 (got {self.threads})")
        self.drafting.validate()


def _kind(info) -> str:
    return "hybrid" if info.hybrid else ("recurrent" if info.recurrent else "transformer")


class Engine:
    """A loaded target (and draft) ready to generate."""

    def __init__(self, config: EngineConfig):
        config.validate()
        self.config = config
        self.compat = None
        if config.drafter == "model":
            report = check_files(config.target, config.draft)
            if not report.compatible:
                raise IncompatiblePair(report.summary(), report)
            self.compat = report
        threads = config.threads or default_threads()
        self.target_model = Model(config.target, gpu_layers=config.gpu_layers)
        depth = config.drafting.draft_max + 1 if config.drafter != "none" else 0
        if config.rollback_depth is not None:
            depth = config.rollback_depth
        self.target_ctx = Context(self.target_model, n_ctx=config.n_ctx, threads=threads,
                                  n_batch=config.n_batch, cache_type=config.cache_type, rollback_depth=depth)
        self.draft_model = None
        self.draft_ctx = None
        if config.drafter == "model":
            gl = config.gpu_layers_draft if config.gpu_layers_draft is not None else config.gpu_layers
            self.draft_model = Model(config.draft, gpu_layers=gl)
            self.draft_ctx = Context(self.draft_model, n_ctx=config.n_ctx, threads=threads,
                                     n_batch=config.n_batch, cache_type=config.cache_type)
            self.drafter = ModelDrafter(self.draft_ctx)
        elif config.drafter == "ngram":
            self.drafter = NgramDrafter()
        else:
            self.drafter = NoDrafter()
        self._spec = Generator(self.target_ctx, self.drafter)
        self._plain = Generator(self.target_ctx, NoDrafter())
        self._ngram: Generator | None = None
        self._lock = threading.Lock()

    # -- prompts ----------------------------------------------------------------------
    def tokenize(self, prompt: str) -> list[int]:
        return self.target_model.tokenize(prompt, add_special=True, parse_special=False)

    def chat_prompt(self, messages: list[dict]) -> list[int]:
        return chat_tokens(self.target_model, messages)

    # -- generation -------------------------------------------------------------------
    def new_policy(self):
        if self.config.drafter == "none":
            return FixedPolicy(0)
        return self.config.drafting.policy()

    def generate(self, prompt_tokens: list[int], *, sampling: SamplingConfig | None = None,
                 max_tokens: int = 256, stop: list[str] | tuple[str, ...] = (),
                 speculative: bool = True, policy=None, drafter: str | None = None,
                 cancel: threading.Event | None = None) -> Iterator[Event]:
        """Stream events; ``speculative=False`` runs the target alone through the same loop.
        ``drafter="ngram"`` drafts by prompt lookup even when a draft model is loaded."""
        with self._lock:
            if speculative and drafter == "ngram" and self.config.drafter != "ngram":
                if self._ngram is None:
                    self._ngram = Generator(self.target_ctx, NgramDrafter())
                gen, pol = self._ngram, policy or self.new_policy()
            elif speculative and self.config.drafter != "none":
                gen, pol = self._spec, policy or self.new_policy()
            else:
                gen, pol = self._plain, FixedPolicy(0)
            yield from gen.generate(prompt_tokens, sampling=sampling, max_tokens=max_tokens,
                                    stop=stop, policy=pol, cancel=cancel)

    def reset(self) -> None:
        """Forget cached prompts in both models (for fair timing between runs)."""
        self.target_ctx.clear()
        if self.draft_ctx is not None:
            self.draft_ctx.clear()

    # -- description ------------------------------------------------------------------
    def describe(self) -> dict:
        t = self.target_model.info
        out = {
            "target": {"path": t.path, "model": t.description, "backend": t.backend,
                       "gpu_layers": t.gpu_layers, "n_layer": t.n_layer, "kind": _kind(t),
                       "memory": self.target_ctx.rollback},
            "drafter": self.config.drafter,
            "n_ctx": self.target_ctx.n_ctx,
            "threads": self.target_ctx.threads,
        }
        if self.draft_model is not None:
            d = self.draft_model.info
            out["draft"] = {"path": d.path, "model": d.description, "backend": d.backend,
                            "gpu_layers": d.gpu_layers, "n_layer": d.n_layer,
                            "kind": _kind(d), "memory": self.draft_ctx.rollback}
        return out

    def close(self) -> None:
        for obj in (self.draft_ctx, self.draft_model, self.target_ctx, self.target_model):
            if obj is not None:
                obj.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
