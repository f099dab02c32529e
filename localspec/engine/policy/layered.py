"""Two draft models layered: the small one drafts for the large one, the large one for the target.

Switching between the drafts pays where the text stays one kind long enough for a switch
to be told and repaid: a change is seen a few dozen tokens late, and every switch costs a
catch-up. Where the text alternates faster than that, the switching pair loses to the
better single draft. Layered rounds need no switch: the small draft proposes blocks of
``layer_block`` tokens, the large one checks each block in one batch and extends it (its
own greedy choices where the small one went wrong) until it holds K tokens, and the target
verifies those. Per stretch a layered round is slower than the draft that suits the stretch
(the small one alone on easy text, the large one alone on hard), but it is never the wrong
draft, and it measures both drafts every round: the small one's agreement with the large
one, the large one's acceptance by the target.

The pair goes layered when its draft in use changed ``layer_switches`` times within 1.5 ×
``layer_window`` tokens (the text alternates faster than a switch pays) and, on the recent
text, layered rounds would have made the large draft's tokens ``layer_margin`` cheaper than
it drafts them alone (:meth:`SmallHits.blocks`: where the small draft's agreement swings
between stretches, its mean would price them wrong), at what layered rounds cost over that
price where they ran (a small model's batch may cost more steps than the target's). It leaves when,
over the last ``layer_window`` tokens, a single draft at the acceptance it showed there, or
the target alone, is expected ``layer_margin`` faster than the layered rounds were. The mode
an answer ended in starts the next.
"""

from __future__ import annotations

from collections import deque

from ..events import Step
from . import predict
from .adaptive import AdaptivePolicy
from .pair import LARGE, SMALL, USE, PairPolicy
from .params import DEFAULT, Params
from .rates import best_rate
from .recent import SmallHits

LAYERED = "layered"   # a layered round's Step.source, and the learned mode
PAID = "layered_cost"  # learned: layered rounds' drafting seconds, measured and as priced


class LayeredPair(PairPolicy):
    """:class:`PairPolicy` with a third way to draft: layered rounds (see the module docstring).

    Args:
        as PairPolicy; ``use`` may also be :data:`LAYERED`.
    """

    def __init__(self, small: AdaptivePolicy, large: AdaptivePolicy, params: Params = DEFAULT,
                 use: str | None = None):
        super().__init__(small, large, params, None if use == LAYERED else use)
        self.block = params.layer_block      # tokens the small draft proposes per large-draft batch
        self.layered = use == LAYERED and small.drafting and large.drafting
        self.layerings = 0                   # times the pair went layered
        self._at = 0                         # tokens so far
        self._switched: deque[int] = deque(maxlen=params.layer_switches)   # where the draft in use last changed
        # Layered rounds in the last ``layer_window`` tokens: (tokens, seconds, the small
        # draft's agreed tokens and cut blocks, the large one's accepted tokens and failed rounds).
        self._rounds: deque[tuple[int, float, int, int, int, int]] = deque()
        self._held = 0                       # tokens those rounds emitted
        self.hits = SmallHits(params.layer_window)   # the small draft's hits while not layered
        self._paid = [0.0, 0.0]              # layered rounds' drafting: seconds measured, and as priced

    def drafting_now(self, name: str) -> bool:
        if self.route == LAYERED:
            return name in (SMALL, LARGE)
        return super().drafting_now(name)

    def gate(self):
        return None if self.route == LAYERED else super().gate()   # (a layered draft is greedy)

    def next_k(self) -> int:
        if self.layered and not (self.small.drafting and self.large.drafting):
            self._leave(LARGE if self.large.drafting else SMALL, None)
        if not self.layered:
            return super().next_k()
        self.probe = self.measuring = False
        self.score = ""
        k = self.large.next_k() and self._layered_k()
        self.route = LAYERED if k else LARGE      # (a plain step its policy asked for)
        self.ks = {SMALL: self.block if k else 0, LARGE: k}
        return k

    def _priced(self) -> tuple[int, float, float]:
        """(the small draft's block, the seconds per token the large draft holds in a layered
        round with blocks of it, and drafting alone), the block the cheapest of 1 to
        ``layer_block``: the small draft's steps and a large-draft batch per block, the batch
        priced as its step times the target's cost of that batch over a step (the device's,
        which both models share), over the tokens a block brings at the small draft's agreement."""
        l_first, l_next = self.large.costs.draft_seconds()
        step = l_next or l_first
        a = self.small.acc.mean
        best = (0, 0.0)
        for block in range(1, self.p.layer_block + 1):
            per = self._block_seconds(block, step) / (1.0 + sum(a ** i for i in range(1, block + 1)))
            if not best[0] or per < best[1]:
                best = (block, per)
        return best[0], best[1], step

    def _block_seconds(self, block: int, step: float) -> float:
        """A block's price: the small draft's ``block`` steps and the large draft's batch of
        ``block`` + 1 (its ``step`` times the target's cost of that batch over a step)."""
        s_first, s_next = self.small.costs.draft_seconds()
        table = self.large.costs.table()
        shape = table[block + 1] / table[1] if len(table) > block + 1 and table[1] > 0 else 1.0
        return s_first + (block - 1) * s_next + step * shape

    def _layered_k(self) -> int:
        """Sets the small draft's block and returns the K of the highest expected rate of a
        layered round."""
        self.block, curve = self._layered_curve()
        return predict.best(curve, self.large.k)[0]

    def _layered_curve(self, alpha: float | None = None) -> tuple[int, dict[int, tuple[float, float]]]:
        """(the small draft's block, a layered round's expected (tokens, seconds) for each K): the
        large draft's acceptance (``alpha`` in its place), the target's costs, and the draft's
        price per token (:meth:`_priced`)."""
        pol = self.large
        block, per, _ = self._priced()
        cont, acc = pol.acc.rates(alpha)
        c = pol.costs
        return block, predict.curve(c.table(), pol.ladder, cont, acc, per + c.loop(True), per, c.loop(False))

    def _cheaper(self) -> bool:
        """Whether layered rounds would have made the large draft's tokens ``layer_margin``
        cheaper than it drafts them alone on the recent text, the small draft's blocks cut
        where its hits there say (at its mean agreement before it has any), at what layered
        rounds cost over that price where they ran: not where a batch costs its tokens'
        steps, as on a CPU, nor where the small draft is nearly as dear."""
        block, per, alone = self._priced()
        blocks, held = self.hits.blocks(block)
        if held:
            per = blocks * self._block_seconds(block, alone) / held
        if self._paid[1] > 0:
            per *= self._paid[0] / self._paid[1]   # what layered rounds cost here, over their price
        return 0.0 < per < alone * (1.0 - self.p.layer_margin)

    def observe(self, step: Step) -> str | None:
        self._at += step.emitted
        if not self.layered:
            use = self.use
            note = super().observe(step)
            self.hits.add(step, use)
            if self.use != use:
                self._switched.append(self._at)
                if (len(self._switched) == self.p.layer_switches
                        and self._at - self._switched[0] <= self.p.layer_window * 1.5 and self._cheaper()):
                    self._enter()
                    note = f"{note}; the text alternates faster than a switch pays: layered drafts"
            return note
        if step.source != LAYERED:
            note = self.large.observe(step)       # its plain step
            self.small.observe_other(step)
            return note and f"large draft: {note}"
        # Acceptances only: whether layered rounds pay is this policy's to judge, not the
        # drafts' own (their costs alone are not a layered round's).
        agreed = failed = 0
        for n, a in step.helper_blocks:
            self.small.acc.judge(n, n, a)
            agreed, failed = agreed + a, failed + int(a < n)
        self.small.observe_other(step)
        self.large.observe_other(step)
        self.large.acc.judge(step.k, step.drafted, step.accepted)
        l_first, l_next = self.large.costs.draft_seconds()
        self._paid[0] += step.draft_seconds
        self._paid[1] += sum(self._block_seconds(n, l_next or l_first) for n, _ in step.helper_blocks)
        self._rounds.append((step.emitted, step.draft_seconds + step.verify_seconds, agreed, failed,
                             step.accepted, int(step.accepted < step.drafted)))
        self._held += step.emitted
        while self._held - self._rounds[0][0] >= self.p.layer_window:
            self._held -= self._rounds.popleft()[0]
        return self._judge_layers() or self._losing()

    def _losing(self) -> str | None:
        """Leave layered rounds at once, to the large draft (whose policy then pauses on its own
        evidence), when even the large draft's acceptance at its upper bound would not make them
        beat the target alone: the text turned hard for both drafts, and a window's verdict
        would come ``layer_window`` tokens later."""
        pol = self.large
        if not self.p.layer_quit or not pol.costs.known:
            return None
        mean, _, hi = pol.acc.bounds()
        if max(predict.speedups(self._layered_curve(max(hi, mean))[1]).values(), default=0.0) >= 1.0:
            return None
        return self._leave(LARGE, "layered rounds lose to the target alone on this text even read optimistically")

    def _enter(self) -> None:
        self.layered = True
        self._stay = None                    # (a small draft's stay ends without a verdict)
        self.layerings += 1
        self._rounds.clear()
        self._held = 0

    def _judge_layers(self, least: int | None = None) -> str | None:
        """Leave layered drafting when, over the last ``layer_window`` tokens (at least
        ``least`` of them, at an answer's end), a single draft at the acceptance it showed
        there, or the target alone, is expected ``layer_margin`` faster than the layered
        rounds were (a window of at most ~100 rounds: summed each round, it costs microseconds)."""
        if self._held < (self.p.layer_window if least is None else least):
            return None
        tokens = sum(r[0] for r in self._rounds)
        seconds = sum(r[1] for r in self._rounds)
        rates = {}
        for name, (s, f) in ((SMALL, (2, 3)), (LARGE, (4, 5))):
            succ, fail = sum(r[s] for r in self._rounds), sum(r[f] for r in self._rounds)
            rates[name] = best_rate(self.policies[name], (succ + 1.0) / (succ + fail + 2.0)) or 0.0
        plain = self.large.plain_step_seconds()
        rates["target"] = 1.0 / plain if plain else 0.0
        best = max(rates, key=rates.get)
        layered = tokens / seconds if seconds > 0 else 0.0
        if rates[best] <= layered * (1.0 + self.p.layer_margin):
            return None
        # (the target alone: the large draft's policy, in use again, pauses on its own evidence)
        return self._leave(LARGE if best == "target" else best,
                           f"the {best} {'alone' if best == 'target' else 'draft alone'} is expected faster "
                           f"on this text ({rates[best]:.0f} vs {layered:.0f} tok/s layered)")

    def _leave(self, name: str, why: str | None) -> str | None:
        self.layered = False
        self._switched.clear()
        self._take(name)
        self.route = name
        return why

    @classmethod
    def build(cls, draft_min: int, draft_max: int, p_min: float | None, can_pause: bool,
              learned: dict | None = None, params: Params = DEFAULT, size_ratios: tuple | None = None,
              **kw) -> LayeredPair:
        """As PairPolicy's, with what layered rounds cost over their price as ``learned`` says."""
        pair = super().build(draft_min, draft_max, p_min, can_pause, learned, params, size_ratios, **kw)
        paid = (learned or {}).get(PAID)
        if isinstance(paid, list) and len(paid) == 2 and all(isinstance(x, (int, float)) and x >= 0 for x in paid):
            pair._paid = [float(x) for x in paid]
        return pair

    def learned(self) -> dict | None:
        """As PairPolicy's, and what layered rounds cost over their price; layered rounds go on
        in the next answer unless this one's, however few (a quarter of ``layer_window`` at
        least), say a single draft is faster."""
        if self.layered:
            self._judge_layers(self.p.layer_window // 4)
        out = super().learned()
        if out is not None and self.layered:
            out[USE] = LAYERED
        if out is not None and self._paid[1] > 0:
            out[PAID] = list(self._paid)
        return out

    def describe(self) -> str:
        return f"{super().describe()}, or layered"

    def estimates(self) -> dict:
        return super().estimates() | {"layered": self.layered, "layerings": self.layerings,
                                      "in_use": LAYERED if self.layered else self.use}
