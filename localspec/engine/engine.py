"""Load a target (and a draft model) from GGUF paths; run generations described by RunSpecs.

:class:`Engine` owns the models and contexts. :meth:`Engine.run` is the one way to generate:
it validates the :class:`~localspec.engine.spec.RunSpec`, builds the drafting policy and
runs the same :class:`~localspec.engine.generator.Generator` loop for every drafter, so the
target-only baseline and the speculative run differ only in their drafter and policy.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..errors import BadInput, IncompatiblePair
from . import cascade
from .backend import CACHE_TYPES, Context, Model, default_threads
from .chain import ChainDrafter
from .compat import check_files
from .drafters import Drafter, ModelDrafter, NgramDrafter
from .events import Event
from .generator import Generator
from .memory import Memory
from .memory import flush as flush_learned
from .mtp import MtpDrafter, open_mtp_head
from .pair import PairDrafter
from .policy import LOOKUP, MODEL, ChainPolicy, PairPolicy, policy_for
from .spec import DrafterKind, RunSpec
from .template import chat_tokens

DEFAULT_ROLLBACK_DEPTH = RunSpec.draft_max + 1


def rollback_depth(*specs: RunSpec) -> int:
    """Recurrent-state snapshots a target context keeps so that the runs ``specs`` describe
    can cut a rejected draft tail without a checkpoint (llama.cpp's ``n_rs_seq``)."""
    return max([s.draft_max + 1 for s in specs] + [DEFAULT_ROLLBACK_DEPTH])


@dataclass
class EngineConfig:
    """What to load and how: the models, the context, threads, GPU layers, KV cache."""

    target: str
    draft: str | None = None        # a draft model to load (enables DrafterKind.MODEL)
    draft2: str | None = None       # a second draft model (enables DrafterKind.MODELS)
    mtp: bool = False               # load the target's MTP head (enables DrafterKind.MTP)
    mtp_file: str | None = None     # ...from this mtp-*.gguf; None: embedded in the target
    n_ctx: int = 4096
    threads: int | None = None
    gpu_layers: int | None = None   # None: all layers on the GPU when offload is supported
    gpu_layers_draft: int | None = None
    cache_type: str = "f16"
    n_batch: int = 512
    # Recurrent-state snapshots kept for rollback (recurrent/hybrid targets whose architecture
    # supports them); None: the default draft length + 1; 0: always sequence checkpoints.
    rollback_depth: int | None = None
    # Keep what the adaptive policy learns about this pair (costs, acceptance) in
    # learned.json so the next process starts from it; False: only within this Engine.
    remember: bool = True
    # Sample inside llama.cpp's graph (backend sampling); None: when the output layer is on a
    # GPU (see backend.Context).
    device_sampling: bool | None = None
    # The draft model reads each prompt on a thread of its own while the target reads it;
    # None: when both models run on the CPU and their threads together fit the cores.
    read_alongside: bool | None = None
    # Generations stepped together (a server's slots, see batch.py): the contexts hold this
    # many sequences, each with the full n_ctx (KV memory: parallel x n_ctx). Recurrent,
    # hybrid and MTP targets keep 1 (``Engine.parallel_note`` says why).
    parallel: int = 1
    # RPC workers (HOST:PORT) whose devices take the target's layers; the draft model and an
    # MTP head stay on this machine unless rpc_draft. tensor_split: one share per device,
    # the workers' first (default: llama.cpp's split by free memory).
    rpc: tuple[str, ...] = ()
    rpc_draft: bool = False
    tensor_split: tuple[float, ...] | None = None

    def validate(self) -> None:
        from .rpc import parse_endpoints

        self.rpc = parse_endpoints(self.rpc)
        if self.rpc_draft and not self.rpc:
            raise BadInput("--rpc-draft needs workers: give --rpc HOST:PORT")
        if self.tensor_split is not None:
            if not self.rpc:
                raise BadInput("--tensor-split shares the target's layers between RPC workers: give --rpc HOST:PORT")
            if any(x < 0 for x in self.tensor_split) or not any(x > 0 for x in self.tensor_split):
                raise BadInput("--tensor-split takes shares >= 0, at least one above 0 (e.g. 3,1)")
        if self.parallel < 1:
            raise BadInput(f"--parallel must be >= 1 (got {self.parallel})")
        if self.n_ctx < 16:
            raise BadInput(f"--ctx must be at least 16 (got {self.n_ctx})")
        if self.threads is not None and self.threads <= 0:
            raise BadInput(f"--threads must be >= 1 (got {self.threads})")
        if self.cache_type not in CACHE_TYPES:
            raise BadInput(f"unknown KV cache type {self.cache_type!r} (one of {', '.join(CACHE_TYPES)})")
        if self.draft2 and not self.draft:
            raise BadInput("a second draft model needs a first (-d SMALL -d LARGE)")


def _kind(info) -> str:
    return "hybrid" if info.hybrid else ("recurrent" if info.recurrent else "transformer")


class Engine:
    """A loaded target (and draft) ready to generate."""

    def __init__(self, config: EngineConfig):
        config.validate()
        self.config = config
        self.compat = None
        for draft in (config.draft, config.draft2):
            if draft:
                report = check_files(config.target, draft)
                if not report.compatible:
                    raise IncompatiblePair(report.summary(), report)
                self.compat = self.compat or report
        threads = config.threads or default_threads()
        if config.rpc:
            from .rpc import require

            require()
        draft_rpc = config.rpc if config.rpc_draft else ()
        self.target_model = Model(config.target, gpu_layers=config.gpu_layers,
                                  load_mtp=config.mtp and not config.mtp_file, rpc=config.rpc,
                                  tensor_split=config.tensor_split)
        depth = DEFAULT_ROLLBACK_DEPTH if config.rollback_depth is None else config.rollback_depth
        self.parallel, self.parallel_note = config.parallel, ""
        info = self.target_model.info
        if config.parallel > 1 and (info.recurrent or info.hybrid or config.mtp):
            self.parallel = 1
            self.parallel_note = (f"one slot: a {_kind(info)} target" if not config.mtp
                                  else "one slot: the MTP head follows one sequence")
        self.target_ctx = Context(self.target_model, n_ctx=config.n_ctx, threads=threads,
                                  n_batch=config.n_batch, cache_type=config.cache_type, rollback_depth=depth,
                                  device_sampling=config.device_sampling, n_seq=self.parallel)
        self.draft_model = None
        self.draft_ctx = None
        self._draft_size_ratio: float | None = None   # the draft's weights over the target's
        self._generators: dict[DrafterKind, Generator] = {DrafterKind.NONE: Generator(self.target_ctx)}
        if config.draft:
            gl = config.gpu_layers_draft if config.gpu_layers_draft is not None else config.gpu_layers
            self.draft_model = Model(config.draft, gpu_layers=gl, rpc=draft_rpc)
            self.draft_ctx = Context(self.draft_model, n_ctx=config.n_ctx, threads=threads,
                                     n_batch=config.n_batch, cache_type=config.cache_type,
                                     device_sampling=config.device_sampling, n_seq=self.parallel)
            self._read_alongside = (config.read_alongside if config.read_alongside is not None
                                    else self._spare_cores(threads))
            self._draft_size_ratio = self._size_ratio()
            self._generators[DrafterKind.MODEL] = Generator(
                self.target_ctx, ModelDrafter(self.draft_ctx, n_vocab_target=self.target_model.n_vocab),
                read_alongside=self._read_alongside)
        self.draft2_model = None
        self.draft2_ctx = None
        self._pair_ratios: tuple | None = None     # each of two drafts' weights over the target's
        if config.draft2:
            self._load_second_draft(config, threads)
        self.mtp_model = None
        self.mtp_ctx = None
        if config.mtp:
            gl = config.gpu_layers_draft if config.gpu_layers_draft is not None else config.gpu_layers
            self.mtp_model, self.mtp_ctx = open_mtp_head(
                self.target_model, config.mtp_file, n_ctx=config.n_ctx, threads=threads,
                n_batch=config.n_batch, cache_type=CACHE_TYPES[config.cache_type], gpu_layers=gl, rpc=draft_rpc)
            self._generators[DrafterKind.MTP] = Generator(self.target_ctx, MtpDrafter(self.target_ctx, self.mtp_ctx))
        # The one prompt lookup, alone or first in a chain: what it learned of which match
        # lengths the target accepts on this pair serves both.
        self._lookup = NgramDrafter()
        self._lock = threading.Lock()
        self.lock = self._lock   # held while one generation (or a batch round) uses the contexts
        self._runner = None
        # What each drafter's adaptive policy learned: seeds the next generation.
        # (keyed by the device layout: a target step on workers is another cost)
        self.memory = Memory(config.target, config.draft, self.target_model.info.layout, persist=config.remember)

    def _load_second_draft(self, config: EngineConfig, threads: int) -> None:
        """The second draft model and the pair drafter: the smaller weights are the small
        draft (the first draft's own generator, DrafterKind.MODEL, keeps the first)."""
        gl = config.gpu_layers_draft if config.gpu_layers_draft is not None else config.gpu_layers
        self.draft2_model = Model(config.draft2, gpu_layers=gl, rpc=config.rpc if config.rpc_draft else ())
        self.draft2_ctx = Context(self.draft2_model, n_ctx=config.n_ctx, threads=threads,
                                  n_batch=config.n_batch, cache_type=config.cache_type,
                                  device_sampling=config.device_sampling)
        first = self._generators[DrafterKind.MODEL].drafter
        second = ModelDrafter(self.draft2_ctx, n_vocab_target=self.target_model.n_vocab)
        ratios = (self._draft_size_ratio, self._size_ratio(self.draft2_model))
        pair = (first, second)
        if self.draft2_model.info.size_bytes < self.draft_model.info.size_bytes:
            pair, ratios = (second, first), ratios[::-1]
        self._pair_ratios = ratios
        self._generators[DrafterKind.MODELS] = Generator(self.target_ctx, PairDrafter(*pair))

    # -- prompts ----------------------------------------------------------------------
    def tokenize(self, prompt: str) -> list[int]:
        return self.target_model.tokenize(prompt, add_special=True, parse_special=False)

    def chat_prompt(self, messages: list[dict], variables: dict | None = None) -> list[int]:
        """The target's chat template applied to ``messages`` (``variables``: more for the
        template, e.g. ``{"enable_thinking": False}``), tokenized."""
        return chat_tokens(self.target_model, messages, variables=variables)

    # -- generation -------------------------------------------------------------------
    @property
    def drafters(self) -> tuple[DrafterKind, ...]:
        """The drafters this engine can run (a draft model or MTP head only when one is loaded)."""
        return tuple(k for k in DrafterKind if (k in self._generators if k in (DrafterKind.MTP, DrafterKind.MODELS)
                                                else not k.uses_model or self.draft_model is not None))

    def drafter(self, kind: DrafterKind) -> Drafter:
        return self._generator(kind).drafter

    def _generator(self, kind: DrafterKind) -> Generator:
        gen = self._generators.get(kind)
        if gen is None:
            if kind.uses_model and DrafterKind.MODEL not in self._generators:
                raise BadInput("no draft model is loaded: give one (-d DRAFT), or use n-gram or no drafting")
            if kind is DrafterKind.MTP:
                raise BadInput("no MTP head is loaded: give --draft mtp (a target with MTP layers)")
            if kind is DrafterKind.MODELS:
                raise BadInput("two draft models are needed: give -d SMALL -d LARGE")
            if kind is DrafterKind.NGRAM_MODEL:   # shares the model drafter (and its cache)
                model = self._generators[DrafterKind.MODEL]
                gen = Generator(self.target_ctx, ChainDrafter(self._lookup, model.drafter),
                                read_alongside=model.read_alongside)
            else:
                gen = Generator(self.target_ctx, self._lookup)
            self._generators[kind] = gen
        return gen

    def run(self, prompt_tokens: list[int], spec: RunSpec,
            cancel: threading.Event | None = None) -> Iterator[Event]:
        """Stream the events of one generation; the last is ``Done``, which carries the
        drafting policy's estimates and decisions."""
        spec.validate()
        if spec.cascade is not None:
            yield from self._cascade(prompt_tokens, spec, cancel)
            return
        gen = self._generator(spec.drafter)
        with self._lock:
            if self.mtp_ctx is not None:   # the head follows the target's decodes only while it drafts
                self._generators[DrafterKind.MTP].drafter.attach(spec.drafter is DrafterKind.MTP)
            policy = self.policy(spec)
            if isinstance(gen.drafter, ChainDrafter):
                gen.drafter.follow(policy if isinstance(policy, ChainPolicy) else None)
            if isinstance(gen.drafter, PairDrafter):
                gen.drafter.follow(policy if isinstance(policy, PairPolicy) else None)
            try:
                yield from gen.generate(prompt_tokens, spec, policy, cancel)
            finally:
                learned = policy.learned()
                if learned:
                    self._keep(spec.drafter, learned)

    def _cascade(self, prompt_tokens: list[int], spec: RunSpec, cancel: threading.Event | None) -> Iterator[Event]:
        """The draft model answers first; the target only below the threshold (see cascade.py)."""
        if self.draft_ctx is None:
            raise BadInput("a cascade needs a draft model: give -d DRAFT")
        with self._lock:
            self._settle_draft()
            yield from cascade.run(self.target_ctx, self.draft_ctx, prompt_tokens, spec, cancel)

    def policy(self, spec: RunSpec):
        """The drafting policy for one generation of ``spec``, seeded with what this pair learned."""
        ratio = self._pair_ratios if spec.drafter is DrafterKind.MODELS else self._draft_size_ratio
        return policy_for(spec, self._learned(spec) if spec.adaptive and spec.speculative else None, ratio)

    def remember(self, spec: RunSpec, policy) -> None:
        """Keep what ``policy`` learned in a generation of ``spec`` (it seeds the next)."""
        learned = policy.learned()
        if learned:
            self._keep(spec.drafter, learned)

    def runner(self):
        """The :class:`~localspec.engine.batch.BatchRunner` stepping up to ``parallel``
        generations together (one per engine; the draft's reads alongside are settled first)."""
        if self._runner is None:
            from .batch import BatchRunner

            self._settle_draft()
            self._runner = BatchRunner(self)
        return self._runner

    def _keep(self, drafter: DrafterKind, learned: dict) -> None:
        """Keep what a generation learned. A chain's lookups are the lookups alone (the same
        costs, the same matches judged the same way): their part is kept as theirs, so the
        next lookup, alone or chained, starts from the latest of either."""
        if drafter is DrafterKind.NGRAM_MODEL:
            learned = dict(learned)
            lookups = learned.pop(LOOKUP, None)
            if lookups:
                self.memory.put(DrafterKind.NGRAM.value, lookups)
        self.memory.put(self._memory_kind(drafter), learned)

    def _memory_kind(self, drafter: DrafterKind) -> str:
        """The key a drafter's learned state is kept under (two drafts: both files' names)."""
        if drafter is DrafterKind.MODELS:
            return f"{drafter.value}:{os.path.basename(self.config.draft2 or '')}"
        return drafter.value

    def _learned(self, spec: RunSpec) -> dict | None:
        """What seeds this run's policy: the last state learned with this drafter. A chain's
        lookups start from what the lookups learned last, alone or chained (else from what an
        older store kept in the chain's entry); its draft model from what it learned in a
        chain, else alone (a draft model whose prompt read outlasted every answer measured
        only the target in one)."""
        learned = self.memory.get(self._memory_kind(spec.drafter))
        if spec.drafter is DrafterKind.NGRAM_MODEL:
            learned = dict(learned or {})
            learned[LOOKUP] = self.memory.get(DrafterKind.NGRAM.value) or learned.get(LOOKUP)
            own = learned.get(MODEL)
            if not (isinstance(own, dict) and (own.get("costs") or {}).get("draft_first") is not None):
                # it never drafted in a chain
                learned[MODEL] = self.memory.get(DrafterKind.MODEL.value) or own
            learned = learned if learned.get(LOOKUP) or learned.get(MODEL) else None
        return learned

    def _spare_cores(self, threads: int) -> bool:
        """Whether a draft's prompt read can run beside the target's without taking its cores:
        both models on the CPU, and both contexts' threads fit on the physical cores."""
        both_cpu = self.target_model.info.gpu_layers == 0 and self.draft_model.info.gpu_layers == 0
        return both_cpu and 2 * threads <= default_threads()

    def _size_ratio(self, draft: Model | None = None) -> float | None:
        """A draft model's weights over the target's when both run on the same device (all
        layers on the GPU, or none): what a decode reads, so a floor on the draft's relative
        cost before anything is measured. None otherwise."""
        t, d = self.target_model.info, (draft or self.draft_model).info
        same = (t.gpu_layers == 0 and d.gpu_layers == 0) or (t.gpu_layers == t.n_layer and d.gpu_layers == d.n_layer)
        return d.size_bytes / t.size_bytes if same and t.size_bytes > 0 else None

    def logit_gap(self, tokens: list[int], a: int, b: int, stepped: int = 0) -> float:
        """The target's logit of token ``a`` minus that of ``b`` after ``tokens``: where two
        greedy answers part, a gap of a few thousandths is a near-tie, which llama.cpp's
        different rounding of batched and single-token decodes can flip.

        Args:
            tokens: the sequence, decoded from an empty cache.
            a, b: the two tokens compared.
            stepped: how many of the last tokens are decoded one at a time after the rest in
                one batch: with the answer's tokens, the reading the target alone made when
                it picked its token there (0: all in one batch).
        Raises:
            BadInput: no tokens, or ``stepped`` not below their number.
        """
        if not 0 <= stepped < len(tokens):
            raise BadInput("logit_gap needs at least one token read in a batch before those stepped")
        with self._lock:   # a one-off check: decoded from an empty cache, as a fresh run would
            self.target_ctx.clear()
            x = self.target_ctx.decode(tokens[:len(tokens) - stepped], logits="last")
            for t in tokens[len(tokens) - stepped:]:
                x = self.target_ctx.decode([t], logits="last")
            return float(x[a]) - float(x[b])

    def batch_rounding(self, tokens: list[int], window: int = 32) -> float:
        """How far llama.cpp's batched decode moves the target's logits from one-token decodes
        after ``tokens``: over their last ``window`` positions, the largest change of the gap
        between each position's two best tokens (as one-token decodes rank them). A verify
        batch is rounded differently from the target alone's steps: on a CPU by thousandths of
        a logit for F16 weights, not at all for Q8_0 or Q4_0, by tenths for the K-quants (their
        batch kernels differ).

        Raises:
            BadInput: fewer than two tokens.
        """
        n = min(window, len(tokens) - 1)
        if n < 1:
            raise BadInput("batch_rounding needs at least two tokens")
        with self._lock:   # a one-off check, from an empty cache
            ctx = self.target_ctx
            ctx.clear()
            ctx.decode(tokens[:-n], logits="none")
            tops, gaps = [], []
            for t in tokens[-n:]:
                row = ctx.decode([t], logits="last")
                i, j = np.argpartition(row, -2)[-2:]
                tops.append((i, j))
                gaps.append(float(row[i]) - float(row[j]))
            ctx.clear()
            rows = ctx.decode(tokens, logits=n)
            return max(abs(float(r[i]) - float(r[j]) - g) for r, (i, j), g in zip(rows, tops, gaps))

    def reset(self) -> None:
        """Forget cached prompts in both models (for fair timing between runs)."""
        self._settle_draft()
        self.target_ctx.clear()
        for ctx in (self.draft_ctx, self.draft2_ctx):
            if ctx is not None:
                ctx.clear()
        if self.mtp_ctx is not None:
            self.mtp_ctx.clear()

    # -- description ------------------------------------------------------------------
    def describe(self) -> dict:
        t = self.target_model.info
        out = {
            "target": {"path": t.path, "model": t.description, "backend": t.backend,
                       "gpu_layers": t.gpu_layers, "n_layer": t.n_layer, "kind": _kind(t),
                       "memory": self.target_ctx.rollback.value},
            "drafters": [k.value for k in self.drafters],
            "devices": self.devices(),
            "n_ctx": self.target_ctx.n_ctx,
            "threads": self.target_ctx.threads,
            "parallel": self.parallel,
        }
        if self.parallel_note:
            out["parallel_note"] = self.parallel_note
        if self.draft_model is not None:
            d = self.draft_model.info
            out["draft"] = {"path": d.path, "model": d.description, "backend": d.backend,
                            "gpu_layers": d.gpu_layers, "n_layer": d.n_layer,
                            "kind": _kind(d), "memory": self.draft_ctx.rollback.value,
                            "reads_prompt_alongside": self._read_alongside}
        if self.draft2_model is not None:
            d = self.draft2_model.info
            out["draft2"] = {"path": d.path, "model": d.description, "backend": d.backend,
                             "gpu_layers": d.gpu_layers, "n_layer": d.n_layer,
                             "kind": _kind(d), "memory": self.draft2_ctx.rollback.value}
            small = self._generators[DrafterKind.MODELS].drafter.small.ctx
            out["small_draft"] = "draft" if small is self.draft_ctx else "draft2"
        if self.mtp_ctx is not None:
            m = self.mtp_ctx.model
            out["mtp"] = {"path": m.path, "embedded": self.mtp_model is None, "layers": m.n_layer_nextn,
                          "backend": m.info.backend}
        return out

    def devices(self) -> dict[str, dict]:
        """Which devices hold which layers of each model: {"target": {"RPC0": {"layers":
        "0-11", "endpoint": "127.0.0.1:50052"}, ...}, "draft": {...}}; a model wholly on
        this machine reads {"CPU": {"layers": "all"}} (or its backend's name)."""
        out = {}
        for role, model in (("target", self.target_model), ("draft", self.draft_model)):
            if model is None:
                continue
            info = model.info
            if info.layers:
                out[role] = {dev: {"layers": r, "endpoint": info.endpoints.get(dev)} for dev, r in info.layers.items()}
            else:
                out[role] = {info.backend: {"layers": "all", "endpoint": None}}
        return out

    def settle_draft(self) -> None:
        """Wait for a read the draft model runs alongside (before anything else uses its context)."""
        self._settle_draft()

    def _settle_draft(self) -> None:
        """Wait for the last chunk of a read the draft model ran alongside (a generation
        that ends stops it without waiting)."""
        for kind in (DrafterKind.MODEL, DrafterKind.MODELS):
            gen = self._generators.get(kind)
            if gen is not None:
                try:
                    gen.drafter.settle()
                except Exception:  # noqa: BLE001 - a stopped read's failure: its cache is cleared or freed next
                    pass

    def close(self) -> None:
        self._settle_draft()
        flush_learned()
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        for obj in (self.mtp_ctx, self.mtp_model, self.draft2_ctx, self.draft2_model, self.draft_ctx,
                    self.draft_model, self.target_ctx,
                    self.target_model):
            if obj is not None:
                obj.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
