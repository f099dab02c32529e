"""`localspec serve --tui`: a running server's gauges (queue, the requests being generated,
one line per slot with several, their tok/s and acceptance, totals, the last requests).

It only reads :class:`~localspec.server.live.ServerSnapshot` objects, a few times a second,
from a callable: the server knows nothing of this screen.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from ...server.live import ServerSnapshot
from ..format import bar, human_count, pct

REFRESH_S = 0.25


def _uptime(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


def queue_text(snap: ServerSnapshot) -> str:
    fill = snap.queue_depth / snap.queue_capacity if snap.queue_capacity else 0.0
    state = "generating" if snap.current is not None else "idle"
    slots = f" · slots {snap.slots_busy}/{len(snap.slots)} busy" if len(snap.slots) > 1 else ""
    return f"{bar(fill, 20)} {snap.queue_depth}/{snap.queue_capacity} waiting · {state}{slots}"


def current_text(snap: ServerSnapshot) -> str:
    cur = snap.current
    if cur is None:
        return "no request is being generated"
    if len(snap.slots) > 1:
        return "\n".join(f"slot {i}: " + (
            "idle" if c is None else
            f"request {c.id} · {c.tokens} tokens · {c.tokens_per_second:6.1f} tok/s · acceptance "
            f"{pct(c.acceptance)}" + ("" if c.drafting else " (paused)")) for i, c in enumerate(snap.slots))
    drafting = cur.drafter if cur.drafting else f"{cur.drafter} (paused)"
    return (f"request {cur.id} · {cur.endpoint} · drafter {drafting}\n"
            f"prompt {cur.prompt_tokens} tokens ({cur.cached_tokens} cached) · generated {cur.tokens} tokens\n"
            f"{cur.tokens_per_second:6.1f} tok/s   acceptance {bar(cur.acceptance, 12)} {pct(cur.acceptance)} "
            f"({cur.accepted}/{cur.drafted})")


def totals_text(snap: ServerSnapshot) -> str:
    outcomes = " · ".join(f"{k} {v}" for k, v in sorted(snap.requests.items())) or "none yet"
    return (f"requests {snap.served}: {outcomes}\n"
            f"tokens {human_count(snap.tokens)} · drafted {human_count(snap.drafted)} · accepted "
            f"{human_count(snap.accepted)} ({pct(snap.acceptance)}) · up {_uptime(snap.uptime)}")


class ServerScreen(Screen):
    BINDINGS = [Binding("q", "app.quit", "Stop the server and quit")]

    def __init__(self, snapshot: Callable[[], ServerSnapshot]):
        super().__init__(id="server-screen")
        self._snapshot = snapshot
        self._shown_recent: tuple = ()

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="server-body"):
            for name, title in (("queue", "queue"), ("current", "generating"), ("totals", "totals")):
                card = Static("", id=f"server-{name}", classes="server-card")
                card.border_title = title
                yield card
            table = DataTable(id="server-recent", cursor_type="none", zebra_stripes=True)
            table.border_title = "last requests"
            yield table
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#server-recent", DataTable)
        table.add_columns("id", "endpoint", "outcome", "tokens", "tok/s", "acceptance", "TTFT")
        self.refresh_gauges()
        self.set_interval(REFRESH_S, self.refresh_gauges)

    def refresh_gauges(self) -> None:
        snap = self._snapshot()
        self.title = f"localspec serve · {snap.model}"
        self.sub_title = f"{snap.address}/v1 · drafter {snap.drafter}"
        self.query_one("#server-queue", Static).update(queue_text(snap))
        current = self.query_one("#server-current", Static)
        current.update(current_text(snap))
        current.set_class(snap.current is not None, "active")
        self.query_one("#server-totals", Static).update(totals_text(snap))
        if snap.recent != self._shown_recent:
            self._shown_recent = snap.recent
            table = self.query_one("#server-recent", DataTable)
            table.clear()
            for r in reversed(snap.recent):
                table.add_row(r.id, r.endpoint, r.outcome, str(r.tokens), f"{r.tokens_per_second:.1f}",
                              pct(r.acceptance), f"{r.ttft * 1000:.0f} ms")


class ServerApp(App):
    """The server screen on its own (quitting it stops the server)."""

    CSS_PATH = ["../server.tcss"]

    def __init__(self, snapshot: Callable[[], ServerSnapshot]):
        super().__init__()
        self._snapshot = snapshot

    def on_mount(self) -> None:
        self.push_screen(ServerScreen(self._snapshot))
