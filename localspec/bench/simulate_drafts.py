"""The two-draft policy in the simulator: a small and a large draft on stretches of text.

A scenario with a ``drafts`` field (see :mod:`.simulate` for the common fields)::

    {"name": "...", "target_ms": [...], "tokens": 512,
     "drafts": [{"name": "small", "draft_ms": 1.0, "accept": {"easy": [...], "hard": [...]}},
                {"name": "large", "draft_ms": 4.0, "accept": {"easy": [...], "hard": [...]}}],
     "stretches": [["easy", 128], ["hard", 128]],   # the answer's kinds of text, repeated
     "catchup": 0.1,     # optional: a catch-up decode costs this share of a decode per token beyond one
     "noise": 0.1}       # optional: relative noise on every measured time (seeded)

Every setting (the two drafts under the pair's policy, each draft alone under the adaptive
policy, the target alone) runs on the same seeded acceptance draws (one draw per position,
shared by both drafts: a token hard for the small draft is no easier for the large one), so
their tokens per second differ only by their decisions.

Two reference settings say what is reachable, knowing what the policies must measure:
``oracle`` drafts each round with the draft faster on the text at hand, at that draft's best
K for it (it knows the stretches and the acceptances; it pays the idle draft's catch-up
like the pair); ``layered`` is the hierarchy small -> large -> target at each stretch's best
K and small block: the small draft proposes, the large one checks its tokens in one batch
and extends them (standard speculative decoding between the two drafts) until it holds K
tokens, and the target verifies those. The large draft accepts a small token where both
drafts are right on the position's draw (their agreement where both are wrong is not
counted); a large draft's batch of n costs its decode times the target's batch-n / batch-1.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..engine.events import Step
from ..engine.policy import LARGE, LAYERED, SMALL, AdaptivePolicy, FixedPolicy, LayeredPair, Params
from ..errors import BadInput
from .simulate import MIN_TOKENS, Scenario, ablations, scenario_items

SETTINGS = ("both", SMALL, LARGE, "target", "oracle", "layered")
REFERENCE = ("oracle", "layered")   # knowing the stretches: what is reachable, not a policy


@dataclass(frozen=True)
class Draft:
    """One draft model of a two-draft scenario."""

    name: str
    draft_ms: float
    accept: dict[str, tuple[float, ...]]


@dataclass(frozen=True)
class TwoDrafts:
    """A two-draft scenario (see the module docstring)."""

    base: Scenario                     # target_ms, tokens, noise
    drafts: tuple[Draft, Draft]        # small, large
    stretches: tuple[tuple[str, int], ...]
    catchup: float = 0.1

    @property
    def name(self) -> str:
        return self.base.name

    @classmethod
    def from_dict(cls, d: dict) -> TwoDrafts:
        """Raises: BadInput: a field missing or out of range."""
        name = d.get("name", "?")
        try:
            base = Scenario.from_dict({**d, "draft_ms": 1.0, "accept": [1.0]})
            drafts = tuple(Draft(str(x["name"]), float(x["draft_ms"]),
                                 {k: tuple(float(a) for a in v) for k, v in x["accept"].items()})
                           for x in d["drafts"])
            stretches = tuple((str(k), int(n)) for k, n in d["stretches"])
            catchup = float(d.get("catchup", 0.1))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise BadInput(f"scenario {name!r}: bad or missing field ({e})") from None
        if len(drafts) != 2 or [x.name for x in drafts] != [SMALL, LARGE]:
            raise BadInput(f"scenario {name!r}: drafts must be two, named small and large")
        kinds = {k for k, _ in stretches}
        if not stretches or any(n < 1 for _, n in stretches):
            raise BadInput(f"scenario {name!r}: stretches must be [kind, tokens >= 1] pairs")
        for x in drafts:
            if x.draft_ms <= 0 or not kinds <= set(x.accept) or any(
                    not v or not all(0.0 <= a <= 1.0 for a in v) for v in x.accept.values()):
                raise BadInput(f"scenario {name!r}: draft {x.name}: draft_ms > 0 and an acceptance in [0, 1] "
                               f"for every kind of stretch ({', '.join(sorted(kinds))})")
        return cls(base, drafts, stretches, catchup)

    def kind(self, tokens: int) -> str:
        """The kind of text at position ``tokens`` of the answer."""
        period = sum(n for _, n in self.stretches)
        at = tokens % period
        for kind, n in self.stretches:
            if at < n:
                return kind
            at -= n
        return self.stretches[-1][0]


def is_two_drafts(d: dict) -> bool:
    return isinstance(d, dict) and "drafts" in d


def _expected(acc: tuple[float, ...], k: int) -> float:
    """Expected tokens a round emits drafting ``k`` tokens at acceptances ``acc``."""
    out = run = 1.0
    for i in range(k):
        run *= acc[min(i, len(acc) - 1)]
        out += run
    return out


def best_single(s: TwoDrafts, kind: str, only: str | None = None) -> tuple[str, int, float]:
    """(draft, K, tokens per second) of the fastest single draft (or draft ``only``) on
    ``kind`` text, by expectation: K from 0 (the target alone) to 8, no catch-up, no noise."""
    b = s.base
    out = ("", 0, 1.0 / b.target(1, 0))
    for d in s.drafts:
        if only and d.name != only:
            continue
        acc = d.accept[kind]
        for k in range(1, 9):
            rate = _expected(acc, k) / (k * d.draft_ms / 1000.0 + b.target(k + 1, 0))
            if rate > out[2]:
                out = (d.name, k, rate)
    return out


class _Oracle:
    """The faster single draft on the text at hand, at its best K (a reference, not a policy)."""

    adaptive = False
    drafting = True
    probe = False

    def __init__(self, s: TwoDrafts, where):
        self.s, self.where = s, where
        self.plan = {kind: best_single(s, kind) for kind, _ in s.stretches}
        self.route = self.plan[s.stretches[0][0]][0]

    def quiet_rounds(self) -> int:
        return 0

    def next_k(self) -> int:
        self.route, k, _ = self.plan[self.s.kind(self.where())]
        return k

    def observe(self, step: Step) -> None:
        return None

    def passed(self, rounds: int, tokens: int) -> None:
        return None

    def learned(self) -> None:
        return None


def _layered_round(s: TwoDrafts, k: int, ks: int, u: list[float], at: int, kind: str,
                   timed=lambda x, i=0: x) -> tuple[int, float, int, list[tuple[int, int]]]:
    """One round of the hierarchy at position ``at``: the large draft builds ``k`` tokens from
    the small one's blocks of ``ks``, the target verifies them.

    Returns:
        (tokens the target accepted, seconds, small tokens drafted, the small one's blocks:
        (proposed, agreed with the large one)).
    """
    b = s.base
    small, large = s.drafts
    a_s, a_l = small.accept[kind], large.accept[kind]
    shape = b.target(ks + 1, 0) / b.target(1, 0)
    held = small_n = 0
    seconds = 0.0
    blocks = []
    while held < k:
        n = min(ks, k - held)
        agreed = 0
        while agreed < n and u[at + held + agreed] < min(a_s[min(agreed, len(a_s) - 1)],
                                                          a_l[min(held + agreed, len(a_l) - 1)]):
            agreed += 1
        seconds += sum(timed(small.draft_ms / 1000.0, 1 + i) for i in range(n))
        seconds += timed(large.draft_ms / 1000.0 * (b.target(n + 1, 0) / b.target(1, 0) if n < ks else shape), 1)
        small_n += n
        blocks.append((n, agreed))
        held += agreed + 1
    accepted = 0
    while accepted < k and u[at + accepted] < a_l[min(accepted, len(a_l) - 1)]:
        accepted += 1
    return accepted, seconds, small_n, blocks


_LAYERED: dict[tuple, tuple[int, int, float]] = {}   # best_layered's answers


def best_layered(s: TwoDrafts, kind: str, trials: int = 400) -> tuple[int, int, float]:
    """(K, small block, tokens per second) of the hierarchy's best setting on ``kind`` text,
    by the mean of ``trials`` seeded rounds (no noise)."""
    key = (s.base.target_ms, tuple((d.draft_ms, d.accept[kind]) for d in s.drafts), kind, trials)
    if key not in _LAYERED:
        _LAYERED[key] = _search_layered(s, kind, trials)
    return _LAYERED[key]


def _search_layered(s: TwoDrafts, kind: str, trials: int) -> tuple[int, int, float]:
    draws = random.Random(f"layered:{kind}")
    u = [draws.random() for _ in range(trials * 9)]
    b = s.base
    out = (0, 0, 1.0 / b.target(1, 0))
    for k in range(1, 9):
        for ks in range(1, 9):
            tok = sec = 0.0
            for t in range(trials):
                a, seconds, _, _ = _layered_round(s, k, ks, u, t * 9, kind)
                tok += a + 1
                sec += seconds + b.target(k + 1, 0)
            if tok / sec > out[2]:
                out = (k, ks, tok / sec)
    return out


def _simulate_layered(s: TwoDrafts, seed: int) -> tuple[int, float, None, dict]:
    """One answer of ``s`` under the hierarchy at each stretch's best K and small block."""
    b = s.base
    draws = random.Random(seed)
    u = [draws.random() for _ in range(b.tokens + 40)]
    shake = random.Random(f"{seed}:noise")
    noise = [[max(0.05, 1.0 + b.noise * shake.gauss(0.0, 1.0)) for _ in range(9)] for _ in range(b.tokens + 1)]
    plan = {kind: best_layered(s, kind) for kind, _ in s.stretches}
    tokens, seconds, used = 0, 0.0, {SMALL: 0, LARGE: 0}

    def timed(x: float, i: int = 0) -> float:
        return x * noise[tokens][i] if b.noise else x

    while tokens < b.tokens:
        kind = s.kind(tokens)
        k, ks, _ = plan[kind]
        if not k:
            seconds += timed(b.target(1, tokens))
            tokens += 1
            continue
        a, draft_s, small_n, _ = _layered_round(s, k, ks, u, tokens, kind, timed)
        seconds += draft_s + timed(b.target(k + 1, tokens))
        used[SMALL] += small_n
        used[LARGE] += k
        tokens += min(a + 1, b.tokens - tokens)
    return tokens, seconds, None, used


def simulate(s: TwoDrafts, setting: str, seed: int, params: Params | None = None,
             learned: dict | None = None) -> tuple[int, float, dict | None, dict]:
    """One answer of ``s`` under ``setting`` (one of :data:`SETTINGS`).

    Returns:
        (tokens, seconds, what the policy learned, tokens drafted per draft).
    """
    if setting == "layered":
        return _simulate_layered(s, seed)
    b, params = s.base, params or Params()
    draws = random.Random(seed)
    u = [draws.random() for _ in range(b.tokens + 40)]
    shake = random.Random(f"{seed}:noise")
    noise = [[max(0.05, 1.0 + b.noise * shake.gauss(0.0, 1.0)) for _ in range(9)] for _ in range(b.tokens + 1)]
    now = [0.0]
    drafts = {x.name: x for x in s.drafts}
    if setting == "both":
        policy = LayeredPair.build(1, 8, None, True, learned, params, clock=lambda: now[0])
    elif setting == "oracle":
        policy = _Oracle(s, lambda: tokens)
    elif setting in drafts:
        policy = AdaptivePolicy(1, 8, params=params, learned=learned, clock=lambda: now[0])
    else:
        policy = FixedPolicy(0)
    seen = {name: 0 for name in drafts}        # tokens each draft's cache holds
    used = {name: 0 for name in drafts}
    tokens = rounds = 0

    def timed(x: float, i: int = 0) -> float:
        return x * noise[tokens][i] if b.noise else x

    while tokens < b.tokens:
        quiet = min(policy.quiet_rounds(), b.tokens - tokens)
        if quiet:
            for _ in range(quiet):
                now[0] += timed(b.target(1, tokens))
                tokens += 1
            policy.passed(quiet, quiet)
            continue
        k = min(policy.next_k(), b.tokens - tokens - 1)   # as the generator: no drafts past max_tokens
        probe = policy.probe and k > 0
        name = policy.route if setting in ("both", "oracle") else setting
        scored, hits, score_s = getattr(policy, "score", ""), (), 0.0
        if scored:
            hits = _hits(drafts[scored], s, u, seen[scored], tokens)
            score_s = timed(drafts[scored].draft_ms / 1000.0 * (1.0 + s.catchup * (len(hits) - 1)), 0)
            seen[scored] = tokens
            now[0] += score_s
        a = drafted = steps = 0
        draft_s = sync_s = 0.0
        missing = 0
        blocks: list[tuple[int, int]] = []
        if k and name == LAYERED:
            kind = s.kind(tokens)
            a, draft_s, small_n, blocks = _layered_round(s, k, policy.block, u, tokens, kind, timed)
            drafted, steps, sync_s = k, len(blocks), 0.0
            used[SMALL] += small_n
            used[LARGE] += k
            seen[SMALL] = seen[LARGE] = tokens + a
        elif k and name in drafts:
            d = drafts[name]
            acc = d.accept[s.kind(tokens)]
            drafted = k
            while a < drafted and u[tokens + a] < acc[min(a, len(acc) - 1)]:
                a += 1
            missing = min(max(tokens - seen[name], 1), 64)   # a longer one restarts from a window
            steps = drafted
            per = [timed(d.draft_ms / 1000.0, 1 + i) for i in range(steps)]
            per[0] *= 1.0 + s.catchup * (missing - 1)
            draft_s, sync_s = sum(per), per[0]
            used[name] += drafted
        verify_s = timed(b.target(drafted + 1, tokens))
        now[0] += draft_s + verify_s
        emitted = min(a + 1, b.tokens - tokens)
        source = name if drafted else ""
        policy.observe(Step(index=rounds, k=k, drafted=drafted, accepted=a, emitted=emitted, draft_seconds=draft_s,
                            verify_seconds=verify_s, drafting=policy.drafting, draft_steps=steps,
                            verify_batch=drafted + 1, probe=probe, sync_tokens=missing, sync_seconds=sync_s,
                            source=source, scored=scored, scored_hits=hits, score_seconds=score_s,
                            helper_blocks=tuple(blocks)))
        if drafted and name in drafts:
            seen[name] = tokens + a
        tokens += emitted
        rounds += 1
    return tokens, now[0], policy.learned(), used


def _hits(d: Draft, s: TwoDrafts, u: list[float], seen: int, tokens: int) -> tuple[bool, ...]:
    """Whether draft ``d`` predicts each token it missed (up to 64 before ``tokens``): a
    position's draw against its acceptance at the run of hits before it."""
    out, run = [], 0
    for at in range(max(seen, tokens - 64, 0), tokens):
        acc = d.accept[s.kind(at)]
        hit = u[at] < acc[min(run, len(acc) - 1)]
        run = run + 1 if hit else 0
        out.append(hit)
    return tuple(out)


def evaluate(s: TwoDrafts, seeds: int = 1, params: Params | None = None, cold: bool = False) -> dict:
    """Every setting on ``seeds`` seeded answers (more for short ones): tokens per second,
    and the two drafts against the better single draft."""
    seeds = max(seeds, -(-seeds * MIN_TOKENS // s.base.tokens))
    out, drafted = {}, {SMALL: 0, LARGE: 0}
    for setting in SETTINGS:
        runs = []
        for seed in range(seeds):
            learned = None
            if setting not in ("target", *REFERENCE) and not cold:
                learned = simulate(s, setting, seeds + seed, params)[2]
            r = simulate(s, setting, seed, params, learned)
            runs.append(r)
            if setting == "both":
                for name, n in r[3].items():
                    drafted[name] += n
        out[setting] = sum(r[0] for r in runs) / sum(r[1] for r in runs)
    better = max((SMALL, LARGE), key=out.get)
    return {"name": s.name, "both_tps": round(out["both"], 3), "better_single": better,
            "both_over_better_single": round(out["both"] / out[better], 4),
            "oracle_over_better_single": round(out["oracle"] / out[better], 4),
            "layered_over_better_single": round(out["layered"] / out[better], 4),
            "both_over_oracle": round(out["both"] / out["oracle"], 4),
            "settings": {k: round(v, 3) for k, v in out.items()}, "both_drafted": drafted,
            "per_stretch": {kind: _per_stretch(s, kind) for kind in dict(s.stretches)}}


def _per_stretch(s: TwoDrafts, kind: str) -> dict:
    """Each draft's, and the hierarchy's, best expected tokens per second on ``kind`` text."""
    rates = {d.name: round(best_single(s, kind, d.name)[2], 2) for d in s.drafts}
    k, ks, rate = best_layered(s, kind)
    return rates | {"layered": round(rate, 2), "layered_k": k, "layered_small_block": ks}


def report(scenarios: list[TwoDrafts], seeds: int = 1, params: Params | None = None, cold: bool = False) -> dict:
    """The simulator's JSON for two-draft scenarios, with the minimum of both / better single."""
    results = [evaluate(s, seeds, params, cold) for s in scenarios]
    ratios = [r["both_over_better_single"] for r in results]
    return {"scenarios": results, "min_both_over_better_single": min(ratios),
            "min_both_over_oracle": min(r["both_over_oracle"] for r in results), "seeds": seeds, "cold": cold}


# Each mechanism of the two drafts' policy, switched off by these parameters (docs/drafts.md).
ABLATIONS = {
    "layered rounds": {"layer_switches": 10**6},
    "scores within a time budget": {"route_budget": 0.0},
    "the draft in use's last rounds read on their own": {"route_recent_min": 10**6},
    "scores back off while they keep the draft in use": {"score_backoff": 1.0},
    "the small draft's K shortened by first tokens failing": {"miss_k": False},
    "no switch to the small draft while its last stays lost time": {"route_stays": 0},
    "no probe of a paused idle draft while the other drafts": {"quiet_idle": False},
    "layered rounds that lose even read optimistically leave at once": {"layer_quit": False},
}


def _both_tps(s: TwoDrafts, seeds: int, params: Params | None) -> float:
    """The pair's tokens per second over ``seeds`` answers, each after an earlier one (as
    :func:`evaluate` runs it)."""
    seeds = max(seeds, -(-seeds * MIN_TOKENS // s.base.tokens))
    runs = [simulate(s, "both", seed, params, simulate(s, "both", seeds + seed, params)[2]) for seed in range(seeds)]
    return sum(r[0] for r in runs) / sum(r[1] for r in runs)


def ablate(scenarios: list[TwoDrafts], seeds: int = 1) -> dict:
    """Each mechanism switched off in turn: how much the pair loses (or gains) per scenario
    against the full policy; a mechanism earns its place where some scenario loses >= 0.5%
    without it."""
    base = {s.name: _both_tps(s, seeds, None) for s in scenarios}
    return ablations(ABLATIONS, base, lambda s, params: _both_tps(s, seeds, params), scenarios, seeds)


def load(path: str) -> list[TwoDrafts] | None:
    """The two-draft scenarios of a JSON file; None when its scenarios have no ``drafts``
    (the one-draft simulator's). Raises: BadInput: unreadable, or a bad scenario."""
    items = scenario_items(path)
    if not all(is_two_drafts(d) for d in items):
        return None
    return [TwoDrafts.from_dict(d) for d in items]
