"""A deterministic simulator that drives the real drafting policies with a simulated clock.

A scenario says what rounds cost and how drafts get accepted; every setting (the default
adaptive policy, each fixed K, the target alone) runs on the same seeded acceptance draws,
so their tokens per second differ only by their decisions. Format of a scenario (JSON)::

    {"name": "...",
     "target_ms": [ms of a target decode of 1, 2, ... tokens],   # extended linearly past the end
     "draft_ms": 1.0,            # ms per draft token; 0: prompt lookup (one free step)
     "accept": [0.8, 0.7, ...],  # P(position i accepted | all before accepted), the last repeats
     "tokens": 512,
     "then": {"at": 256, "accept": [...]},   # optional: acceptance changes mid-answer
     "noise": 0.1,               # optional: relative noise on every measured time (seeded)
     "drift": 0.5,               # optional: target costs grow by this fraction over the answer
     "loop_ms": [0.03, 0.01],    # optional: a drafting / plain round's time beyond its decodes
     "policy_ms": 0.1,           # optional: the policy's own time in each round it observes
     "match": 0.3,               # optional: P(the drafter proposes anything in a round), a lookup's matches
     "first_ms": 30.0,           # optional: an answer's first decode of each batch size (and the
                                 # draft's first) costs this much more: a GPU building its graph
                                 # (a list: by batch size 1, 2, ..., the last repeating; the draft's
                                 # first as the plain step's)
     "seed_tokens": 8,           # optional: the length of the earlier answer the default starts
                                 # from (default: as long as this one)
     "seed": {"accept": [...], "then": {...}},   # optional: that earlier answer's own acceptance
                                 # (another prompt's text; default: this one's)
     "drafter": "model"}         # optional: "model", "mtp" or "ngram" (default: ngram when draft_ms is 0)
"""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import dataclass, fields, replace

from ..engine.events import Step
from ..engine.policy import AdaptivePolicy, FixedPolicy, Params, predict
from ..errors import BadInput

FIXED_KS = tuple(range(1, 9))
MIN_TOKENS = 512   # tokens per seed a scenario is judged on, at least (short answers run more seeds)


def _by_size(v) -> tuple[float, ...]:
    """``first_ms`` as a tuple by batch size (() when none)."""
    ms = tuple(float(x) for x in v) if isinstance(v, (list, tuple)) else (float(v),)
    return ms if any(ms) else ()


@dataclass(frozen=True)
class Scenario:
    """One simulated pair and answer (see the module docstring for the fields)."""

    name: str
    target_ms: tuple[float, ...]
    draft_ms: float
    accept: tuple[float, ...]
    tokens: int
    then_at: int | None = None
    then_accept: tuple[float, ...] = ()
    noise: float = 0.0
    drift: float = 0.0
    loop_ms: tuple[float, float] = (0.0, 0.0)
    policy_ms: float = 0.0
    match: float = 1.0
    drafter: str = "model"
    first_ms: tuple[float, ...] = ()
    seed_tokens: int | None = None
    seed_accept: tuple[float, ...] = ()
    seed_then_at: int | None = None
    seed_then_accept: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, d: dict) -> Scenario:
        """Raises: BadInput: a field missing or out of range."""
        try:
            then, seed = d.get("then") or {}, d.get("seed") or {}
            seed_then = seed.get("then") or {}
            s = cls(name=str(d["name"]), target_ms=tuple(float(x) for x in d["target_ms"]),
                    draft_ms=float(d["draft_ms"]), accept=tuple(float(x) for x in d["accept"]),
                    tokens=int(d["tokens"]), then_at=int(then["at"]) if then else None,
                    then_accept=tuple(float(x) for x in then.get("accept", ())), noise=float(d.get("noise", 0.0)),
                    drift=float(d.get("drift", 0.0)), loop_ms=tuple(float(x) for x in d.get("loop_ms", (0, 0)))[:2],
                    policy_ms=float(d.get("policy_ms", 0.0)),
                    match=float(d.get("match", 1.0)), first_ms=_by_size(d.get("first_ms", 0.0)),
                    seed_tokens=int(d["seed_tokens"]) if d.get("seed_tokens") is not None else None,
                    seed_accept=tuple(float(x) for x in seed.get("accept", ())),
                    seed_then_at=int(seed_then["at"]) if seed_then else None,
                    seed_then_accept=tuple(float(x) for x in seed_then.get("accept", ())),
                    drafter=str(d.get("drafter") or ("ngram" if float(d["draft_ms"]) == 0 else "model")))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise BadInput(f"scenario {d.get('name', '?')!r}: bad or missing field ({e})") from None
        if min(s.first_ms, default=0.0) < 0 or s.policy_ms < 0 or (s.seed_tokens is not None and s.seed_tokens < 1):
            raise BadInput(f"scenario {s.name!r}: first_ms and policy_ms must be >= 0, seed_tokens >= 1")
        if len(s.loop_ms) != 2 or min(s.loop_ms) < 0:
            raise BadInput(f"scenario {s.name!r}: loop_ms must be two times >= 0 (drafting, plain)")
        if not s.target_ms or min(s.target_ms) <= 0 or not s.accept or s.tokens < 1 or s.draft_ms < 0:
            raise BadInput(f"scenario {s.name!r}: target_ms, accept and tokens must be non-empty and positive")
        rates = s.accept + s.then_accept + s.seed_accept + s.seed_then_accept + (s.match,)
        if any(not 0.0 <= a <= 1.0 for a in rates) or not 0.0 <= s.noise < 1.0 or (seed and not s.seed_accept):
            raise BadInput(f"scenario {s.name!r}: acceptances (seed's given) and match in [0, 1], noise in [0, 1)")
        if s.drafter not in ("model", "mtp", "ngram"):
            raise BadInput(f"scenario {s.name!r}: drafter must be model, mtp or ngram")
        return s

    def target(self, n: int, tokens: int) -> float:
        """Seconds of a target decode of ``n`` tokens after ``tokens`` emitted."""
        ms = self.target_ms
        if n <= len(ms):
            v = ms[n - 1]
        else:
            slope = ms[-1] - ms[-2] if len(ms) > 1 else 0.0
            v = ms[-1] + slope * (n - len(ms))
        return v / 1000.0 * (1.0 + self.drift * tokens / self.tokens)

    def earlier(self) -> Scenario:
        """The earlier answer the default starts from: ``seed_tokens`` long, on ``seed``'s text."""
        s = replace(self, tokens=self.seed_tokens) if self.seed_tokens else self
        if self.seed_accept:
            s = replace(s, accept=self.seed_accept, then_at=self.seed_then_at, then_accept=self.seed_then_accept)
        return s

    def p_accept(self, i: int, tokens: int) -> float:
        acc = self.then_accept if self.then_at is not None and tokens >= self.then_at else self.accept
        return acc[min(i, len(acc)) - 1]


class SimClock:
    """The simulated clock: ``now`` seconds; a ``charge`` set before the policy observes a
    round is added after the clock's next reading (the policy's own time on the round)."""

    def __init__(self):
        self.now = 0.0
        self.charge = 0.0

    def __call__(self) -> float:
        t = self.now
        self.now += self.charge
        self.charge = 0.0
        return t


def simulate(s: Scenario, setting: str, seed: int, params: Params | None = None,
             learned: dict | None = None) -> tuple[int, float, dict | None]:
    """One answer of ``s`` under ``setting`` ("default", "K=n" or "target").

    Args:
        learned: what an earlier answer's policy learned (the product keeps it per pair).
    Returns:
        (tokens, seconds, what this answer's policy learned).
    """
    draws = random.Random(seed)
    u = [draws.random() for _ in range(s.tokens + 40)]
    # Noise is drawn per token position too: a round at the same place costs the same in every setting.
    matches = random.Random(f"{seed}:match")
    shake = random.Random(f"{seed}:noise")
    noise = [[max(0.05, 1.0 + s.noise * shake.gauss(0.0, 1.0)) for _ in range(9)] for _ in range(s.tokens + 1)]
    clock = SimClock()

    def timed(x: float, i: int = 0) -> float:
        return x * noise[tokens][i] if s.noise else x

    if setting == "default":
        policy = AdaptivePolicy(1, 8, params=params or Params(), learned=learned,
                                clock=clock)
    else:
        policy = FixedPolicy(0 if setting == "target" else int(setting.split("=")[1]))
    built: set[int] = set()   # batch sizes decoded once (0: the draft's graph)

    def first_use(size: int) -> float:
        if not s.first_ms or size in built:
            return 0.0
        built.add(size)
        return s.first_ms[min(max(size, 1), len(s.first_ms)) - 1] / 1000.0

    tokens = rounds = 0
    while tokens < s.tokens:
        quiet = min(policy.quiet_rounds(), s.tokens - tokens)
        if quiet:
            for _ in range(quiet):
                clock.now += timed(s.target(1, tokens)) + first_use(1) + s.loop_ms[1] / 1000.0
                tokens += 1
            policy.passed(quiet, quiet)
            continue
        k = min(policy.next_k(), s.tokens - tokens - 1)   # as the generator: no drafts past max_tokens
        probe = policy.probe and k > 0
        drafted = k if k and (s.match >= 1.0 or matches.random() < s.match) else 0
        a = 0
        while a < drafted and u[tokens + a] < s.p_accept(a + 1, tokens):
            a += 1
        if k:
            steps = 1 if s.drafter == "ngram" else drafted
            per = [timed(s.draft_ms / 1000.0, 1 + i) + (first_use(0) if i == 0 and steps else 0.0)
                   for i in range(steps)]
            draft_s, sync_s = sum(per), per[0]
        else:
            steps, draft_s, sync_s = 0, 0.0, 0.0
        verify_s = timed(s.target(drafted + 1, tokens)) + first_use(drafted + 1)
        clock.now += draft_s + verify_s + s.loop_ms[0 if k else 1] / 1000.0
        emitted = min(a + 1, s.tokens - tokens)
        if setting == "default":
            clock.charge = s.policy_ms / 1000.0
        policy.observe(Step(index=rounds, k=k, drafted=drafted, accepted=a, emitted=emitted, draft_seconds=draft_s,
                            verify_seconds=verify_s, drafting=policy.drafting, draft_steps=steps,
                            verify_batch=drafted + 1, probe=probe, sync_tokens=1 if k else 0, sync_seconds=sync_s))
        tokens += emitted
        rounds += 1
    return tokens, clock.now, policy.learned()


def evaluate(s: Scenario, seeds: int = 1, params: Params | None = None, cold: bool = False) -> dict:
    """Every setting on ``seeds`` seeded answers: tokens per second over all of them, and the
    default's place against the best fixed setting (the target alone among them), as the
    :func:`informed` one's.

    Args:
        seeds: answers per setting, more for answers under ``MIN_TOKENS`` (the same total).
        cold: the default starts from nothing; else from what one earlier answer (other
            draws) learned, as the product starts from what it learned of the pair.
    """
    out = {}
    seeds = max(seeds, -(-seeds * MIN_TOKENS // s.tokens))   # a short answer is run more often
    for setting in ["default", "target"] + [f"K={k}" for k in FIXED_KS]:
        runs = []
        for seed in range(seeds):
            learned = None
            if setting == "default" and not cold:
                learned = simulate(s.earlier(), setting, seeds + seed, params)[2]
            runs.append(simulate(s, setting, seed, params, learned))
        out[setting] = sum(r[0] for r in runs) / sum(r[1] for r in runs)
    best = max((k for k in out if k != "default"), key=out.get)
    told = informed(s)
    return {"name": s.name, "default_tps": round(out["default"], 3),
            "best": {"setting": best, "tps": round(out[best], 3)},
            "default_over_best": round(out["default"] / out[best], 4),
            "informed": {"setting": told, "over_best": round(out[told] / out[best], 4)},
            "settings": {k: round(v, 3) for k, v in out.items()}}


def informed(s: Scenario) -> str:
    """The fixed setting someone told the scenario's costs and acceptance would choose: the
    fewest expected seconds for the answer (each stretch of acceptance at its mid-point's
    costs, its rounds priced by the policy's own :func:`predict.curve`). Where it reads >= 0.97
    of the best fixed and the default does not, the default lost what learning those facts
    from rounds costs; below, the draws' luck."""
    at = s.then_at if s.then_at is not None and 0 < s.then_at < s.tokens else s.tokens
    stretches = [(at, at / 2, s.accept)] + ([(s.tokens - at, (at + s.tokens) / 2, s.then_accept)]
                                            if at < s.tokens else [])
    top = FIXED_KS[-1]
    cont = [1.0, s.match] + [1.0] * top        # a round drafts all K or, missing a match, none
    lookup, draft = s.drafter == "ngram", s.draft_ms / 1000.0
    # A lookup's one step is paid every round; a draft's decodes only by a round that drafts.
    fixed, step = (draft if lookup else s.match * draft) + s.loop_ms[0] / 1000.0, 0.0 if lookup else draft

    def first(size: int) -> float:      # (as simulate's first_use: an answer's one-off)
        return s.first_ms[min(max(size, 1), len(s.first_ms)) - 1] / 1000.0 if s.first_ms else 0.0

    seconds = {k: (first(1) if not k or s.match < 1.0 else 0.0) + ((first(k + 1) + first(0)) if k else 0.0)
               for k in (0,) + FIXED_KS}
    for n, mid, acc in stretches:
        table = [0.0] + [s.target(b, mid) for b in range(1, top + 2)]
        acc = [0.0] + [acc[min(i, len(acc)) - 1] for i in range(1, top + 1)]
        for k, (tokens, secs) in predict.curve(table, list(FIXED_KS), cont, acc, fixed, step,
                                               s.loop_ms[1] / 1000.0).items():
            seconds[k] += n * secs / tokens
    k = min(seconds, key=seconds.get)
    return f"K={k}" if k else "target"


def scenario_items(path: str) -> list:
    """The raw scenarios of a JSON file: a list, or {"scenarios": [...]}.

    Raises:
        BadInput: unreadable, or not a non-empty list.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise BadInput(f"cannot read scenarios from {path}: {e}") from None
    items = data.get("scenarios") if isinstance(data, dict) else data
    if not isinstance(items, list) or not items:
        raise BadInput(f"{path}: expected a list of scenarios")
    return items


def load(path: str) -> list[Scenario]:
    """The scenarios of a JSON file (:func:`scenario_items`).

    Raises:
        BadInput: unreadable, or a bad scenario.
    """
    return [Scenario.from_dict(d) for d in scenario_items(path)]


def random_scenarios(n: int, seed: int = 0) -> list[dict]:
    """``n`` scenarios drawn (seeded) from the contract's space: scenarios nobody wrote, to
    check the default beyond the shipped ones. A target step of 0.2-80 ms, flat, moderate or
    linear in the batch size; prompt lookup in a quarter, else a draft (a third of them an
    MTP head) at 1-100% of the step; per-position acceptance anywhere in 0.02-1; answers of
    32-1,024 tokens; in some a change of acceptance midway, in half 10% noise; in a quarter
    the earlier answer the default starts from read another text (its own acceptance).

    Raises:
        BadInput: ``n`` below 1.
    """
    if n < 1:
        raise BadInput("the number of random scenarios must be >= 1")
    rng, out = random.Random(seed), []
    for i in range(n):
        step = math.exp(rng.uniform(math.log(0.2), math.log(80.0)))
        shape = rng.choice(("flat", "moderate", "linear"))
        slope = rng.uniform(*{"flat": (0.0, 0.03), "moderate": (0.03, 0.3), "linear": (0.3, 1.0)}[shape])
        lookup = rng.random() < 0.25
        rise = 0.3 if lookup else 0.12   # a lookup's later positions tend up (a match goes on)
        d = {"name": f"random-{seed}-{i}-{shape}-{'lookup' if lookup else 'draft'}",
             "target_ms": [round(step * (1 + slope * j), 4) for j in range(9)],
             "draft_ms": 0.0 if lookup else round(step * math.exp(rng.uniform(math.log(0.01), 0.0)), 4),
             "accept": _accept(rng, rise), "tokens": rng.choice((32, 64, 128, 256, 512, 1024))}
        if rng.random() < 0.3:
            d["then"] = {"at": int(d["tokens"] * rng.uniform(0.2, 0.8)), "accept": _accept(rng, rise)}
        if rng.random() < 0.5:
            d["noise"] = 0.1
        if not lookup and rng.random() < 0.3:
            d["drafter"] = "mtp"
        earlier = random.Random(f"{seed}:{i}:earlier")   # (its own stream: the fields above draw as they did)
        if earlier.random() < 0.25:
            d["seed"] = {"accept": _accept(earlier, rise)}
            d["name"] += "-after-another-text"
        out.append(d)
    return out


def _accept(rng: random.Random, rise: float) -> list[float]:
    """Eight per-position acceptances, a random walk from 0.02-0.97 (steps -0.12 to ``rise``)."""
    a = [rng.uniform(0.02, 0.97)]
    for _ in range(7):
        a.append(min(1.0, max(0.0, a[-1] + rng.uniform(-0.12, rise))))
    return [round(x, 3) for x in a]


def report(scenarios: list[Scenario], seeds: int = 1, params: Params | None = None, cold: bool = False) -> dict:
    """The simulator's JSON: each scenario's result, and the minimum and median of default/best."""
    results = [evaluate(s, seeds, params, cold) for s in scenarios]
    ratios = [r["default_over_best"] for r in results]
    return {"scenarios": results, "min_default_over_best": min(ratios),
            "median_default_over_best": round(statistics.median(ratios), 4),
            "informed_below_0_97": sum(r["informed"]["over_best"] < 0.97 for r in results),
            "seeds": seeds, "cold": cold}


# Each mechanism of the adaptive policy, switched off by these parameters (see docs/adaptive-policy.md).
ABLATIONS = {
    "shift detection": {"shift_z": 1e9},
    "pause on a clear expected loss": {"expected_loss": 1.0},
    "K chosen with costs read optimistically": {"explore_z": 0.0},
    "plain-step refresh by budget": {"refresh_min": 10**9, "refresh_max": 10**9},
    "plain-step refresh while its error could turn a decision": {"refresh_z": 0.0},
    "common cost level (drift with context)": {"level_rate": 0.0},
    "per-position acceptance": {"position_prior": 1e9},
    "probes weigh more while paused": {"probe_decay": 0.98},
    "failed probes back off": {"probe_backoff": 1},
    "a probe paid for by the ones before: at once": {"probe_credit": False},
    "probes of the K in force (not 4 tokens)": {"probe_k": 4},
    "margin to move K": {"move_margin": 0.0},
    "loop time priced": {"measure_loop": False},
    "the policy's own time priced apart": {"own_apart": False},
    "monotone verify costs": {"monotone": False},
    "start paused from what was learned": {"seeded_pause": False},
    "... not on costs each sampled once": {"lone_guard": False},
    "... first probe at once": {"early_probe": False},
    "... the next at once on a share of the last answer's budget": {"early_share": 0.0},
    "carried acceptance on trial": {"carried_trial": False},
    "a plain step's lone fresh sample averaged with its carried cost": {"carried_blend": False},
    "a batch size's first decode priced as a one-off": {"build_min": 1e9},
}


def ablate(scenarios: list[Scenario], seeds: int = 1) -> dict:
    """Each mechanism switched off in turn: how much the default loses (or gains) per
    scenario against the full policy; a mechanism earns its place where some scenario
    loses >= 0.5% without it."""
    base = {r["name"]: r["default_tps"] for r in report(scenarios, seeds)["scenarios"]}
    return ablations(ABLATIONS, base, lambda s, params: _default_tps(s, seeds, params), scenarios, seeds)


def ablations(mechanisms: dict[str, dict], base: dict[str, float], tps, scenarios: list, seeds: int) -> dict:
    """The ablation report: for each mechanism (switched off by its parameters), what
    ``tps(scenario, params)`` loses against ``base`` (tokens per second by scenario name) in
    each scenario; it earns its place where some scenario loses >= 0.5%."""
    out = []
    for name, overrides in mechanisms.items():
        params = params_with(overrides)
        changes = {s.name: 1.0 - tps(s, params) / base[s.name] for s in scenarios}
        worst = max(changes, key=changes.get)
        out.append({"mechanism": name, "params": overrides, "worst_scenario": worst,
                    "loss_without": round(changes[worst], 4), "earns_its_place": changes[worst] >= 0.005,
                    "losses": {k: round(v, 4) for k, v in changes.items() if abs(v) >= 0.005}})
    return {"ablations": out, "seeds": seeds}


def _default_tps(s: Scenario, seeds: int, params: Params) -> float:
    seeds = max(seeds, -(-seeds * MIN_TOKENS // s.tokens))
    runs = [simulate(s, "default", seed, params, simulate(s.earlier(), "default", seeds + seed, params)[2])
            for seed in range(seeds)]
    return sum(r[0] for r in runs) / sum(r[1] for r in runs)


def params_with(overrides: dict) -> Params:
    """Params with ``overrides`` applied. Raises: BadInput: an unknown name."""
    names = {f.name for f in fields(Params)}
    bad = sorted(set(overrides) - names)
    if bad:
        raise BadInput(f"unknown policy parameter(s): {', '.join(bad)}")
    return replace(Params(), **overrides)
