"""The loaded models: names, quantizations, sizes, backend, GPU layers, tokenizer verdict."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from ..format import human_bytes, human_count
from ..session import ModelCard, ModelSummary

_DRAFTERS = {"model": "draft model", "ngram": "n-gram (prompt lookup)", "none": "none"}


class ModelPanel(Widget):
    COMPONENT_CLASSES = {"panel--label", "panel--name", "panel--muted", "panel--good", "panel--bad"}

    def __init__(self, **kw):
        super().__init__(**kw)
        self.summary: ModelSummary | None = None
        self.status = "no model loaded"

    def s(self, name: str):
        return self.get_component_rich_style(f"panel--{name}", partial=True)

    def show(self, summary: ModelSummary | None, status: str = "") -> None:
        self.summary = summary
        self.status = status
        self.refresh(layout=True)

    def _card(self, t: Text, c: ModelCard) -> None:
        t.append(f"{c.role:<7}", self.s("label"))
        t.append(f"{c.name}\n", self.s("name"))
        gpu = f"{c.gpu_layers}/{c.n_layer} layers on GPU"
        t.append(f"       {c.quant} · {human_bytes(c.size_bytes)} · {human_count(c.n_params)} params\n",
                 self.s("muted"))
        t.append(f"       {c.backend} · {gpu}\n", self.s("muted"))

    def render(self) -> Text:
        t = Text()
        sm = self.summary
        if sm is None:
            t.append(self.status or "no model loaded", self.s("muted"))
            return t
        self._card(t, sm.target)
        if sm.draft is not None:
            self._card(t, sm.draft)
        else:
            t.append("draft  ", self.s("label"))
            t.append(f"{_DRAFTERS.get(sm.drafter, sm.drafter)}\n", self.s("name"))
        t.append("tokens ", self.s("label"))
        style = self.s("good") if sm.compatible else (self.s("bad") if sm.compatible is False else self.s("muted"))
        t.append(("✓ " if sm.compatible else "") + sm.compat + "\n", style)
        t.append("ctx    ", self.s("label"))
        t.append(f"{sm.n_ctx} tokens · {sm.threads} threads", self.s("muted"))
        return t
