"""The loaded models: names, quantizations, sizes, backend, GPU layers, tokenizer verdict."""

from __future__ import annotations

import textwrap

from ...chat.session import ModelCard, ModelSummary
from ..format import human_bytes, human_count
from .gauges import Card, Lines

_DRAFTERS = {"model": "draft model", "ngram": "n-gram (prompt lookup)", "none": "none", "mtp": "MTP head"}
INDENT = 7   # the label column


class ModelsCard(Card):
    """The model panel of the gauge column."""

    title = "models"

    def __init__(self) -> None:
        super().__init__()
        self.summary: ModelSummary | None = None
        self.status = "no model loaded"

    def show(self, summary: ModelSummary | None, status: str = "") -> None:
        self.summary = summary
        self.status = status
        self.changed()

    def _model(self, out: Lines, c: ModelCard) -> None:
        out.add(f"{c.role:<{INDENT}}", "label")
        out.add(f"{c.name}\n", "name")
        pad = " " * INDENT
        gpu = f"{c.gpu_layers}/{c.n_layer} layers on GPU"
        out.add(f"{pad}{c.quant} · {human_bytes(c.size_bytes)} · {human_count(c.n_params)} params\n", "muted")
        if c.devices:   # layers on RPC workers: which device holds which
            out.add(f"{pad}{c.backend}\n", "muted")
            for part in c.devices.split(" · "):
                out.add(f"{pad}{part}\n", "muted")
        else:
            out.add(f"{pad}{c.backend} · {gpu}\n", "muted")

    def write(self, out: Lines) -> None:
        sm = self.summary
        if sm is None:
            out.add("\n".join(textwrap.wrap(self.status or "no model loaded", max(out.width, 10))), "muted")
            return
        self._model(out, sm.target)
        if sm.draft is not None and sm.drafter in ("model", "models"):
            self._model(out, sm.draft)
            if sm.draft2 is not None and sm.drafter == "models":
                self._model(out, sm.draft2)
        else:
            out.add("draft".ljust(INDENT), "label")
            out.add(f"{_DRAFTERS.get(sm.drafter, sm.drafter)}\n", "name")
            if sm.drafter == "mtp" and sm.mtp:
                out.add(f"{' ' * INDENT}{sm.mtp}\n", "muted")
        out.add("tokens".ljust(INDENT), "label")
        style = "good" if sm.compatible else ("bad" if sm.compatible is False else "muted")
        verdict = textwrap.wrap(("✓ " if sm.compatible else "") + sm.compat, max(out.width - INDENT, 10))
        out.add(("\n" + " " * INDENT).join(verdict) + "\n", style)
        out.add("ctx".ljust(INDENT), "label")
        out.add(f"{sm.n_ctx} tokens · {sm.threads} threads", "muted")
