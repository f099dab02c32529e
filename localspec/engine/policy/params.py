"""Every tunable of the adaptive policy, in one frozen object.

No other module of the policy holds a tuning constant: the simulator
(``scripts/simulate_policy.py``) and the tests vary these to prove what each one is for.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Params:
    """The adaptive policy's parameters (units in brackets)."""

    first_k: int = 3                # draft length of the first round when nothing is known [tokens]
    window: int = 16                # recent samples kept per measured cost [samples]
    z: float = 1.645                # one-sided confidence of a pause (~95%) [standard deviations]
    decay: float = 0.98             # acceptance evidence kept per judged round (~50 rounds) [factor]
    probe_decay: float = 0.7        # ... per probe, the only fresh evidence while paused [factor]
    position_prior: float = 2.0     # pseudo-rounds pulling a position's acceptance to the pooled one [rounds]
    seed_weight: float = 6.0        # acceptance evidence carried into a new generation [tokens]
    resume_weight: float = 8.0      # acceptance evidence kept on a resume or a shift [tokens]
    shift_z: float = 3.5            # accepted tokens this far off their prediction ... [standard deviations]
    shift_rounds: int = 8           # ... over this many recent rounds: the text changed [rounds]
    shift_min: float = 1.5          # ... and at least this many [tokens]
    min_rounds: int = 4             # drafting rounds after a (re)start before acceptance may pause [rounds]
    move_margin: float = 0.02       # a new K must be predicted this much faster [fraction]
    expected_loss: float = 0.08     # drafting pauses when expected to lose this much ... [fraction]
    expected_rounds: int = 16       # ... over this many fresh drafting rounds [rounds]
    explore_z: float = 1.0          # K is chosen with costs this many errors in drafting's favour [standard errors]
    refresh_z: float = 1.645        # the plain step is re-measured while this many of its errors turn a decision
    refresh_share: float = 0.005    # plain steps re-measuring the target step: this share of the time [fraction]
    refresh_min: int = 12           # drafting rounds between plain-step measurements, at least [rounds]
    refresh_max: int = 400          # ... and at most [rounds]
    probe_budget: float = 0.02      # time spent on probes while paused, at most [fraction]
    probe_k: int = 1                # a probe drafts at least this many tokens (and the K in force) [tokens]
    probe_min: int = 8              # tokens between probes, at least [tokens]
    probe_max: int = 4096           # ... and at most [tokens]
    probe_backoff: int = 2          # failed probes in a row widen the gap up to this (and the tokens so far) [factor]
    probe_credit: bool = True       # a probe whose gain covers the next one's expected cost: the next at once
    catchup_window: int = 32        # tokens a drafter re-reads for a probe after a long pause [tokens]
    noise: float = 0.2              # a measured time's relative error until the machine's is measured [fraction]
    lone_slope: float = 0.15        # with one batch size measured, each further token costs this share of it
    level_rate: float = 0.2         # how fast the target's common cost level follows each round [fraction]
    route_margin: float = 0.02      # a chain's model takes a round a lookup matched when this much faster [fraction]
    route_rounds: int = 16          # two drafts: rounds a switch's catch-up is spread over; the idle one, costs
                                    # unknown, drafts a round to learn them after this many [rounds]
    route_budget: float = 0.02      # ... scores of the idle one take this share of the time at most [fraction]
    score_backoff: float = 2.0      # ... a share divided by this by each score that keeps the draft in use [factor]
    score_min: int = 16             # ... a score decides on at least this many tokens [tokens]
    route_prior: float = 4.0        # ... acceptance evidence the idle one keeps when scored [tokens]
    route_recent: int = 6           # the draft in use's last rounds read on their own at a stretch change [rounds]
    route_recent_min: int = 3       # ... once there are this many [rounds]
    route_stays: int = 3            # ... the small draft's last stays, lost time in all: no switch to it [stays]
    quiet_idle: bool = True         # ... a paused idle draft does not probe while the other drafts (scores tell)
    miss_k: bool = True             # ... the small draft's first tokens failing against the odds shorten its K
    layer_block: int = 2            # layered drafts: the small one proposes up to this per large-draft batch [tokens]
    layer_switches: int = 3         # ... this many switches within 1.5 windows go layered [switches]
    layer_window: int = 512         # ... a single draft expected faster over this many tokens ... [tokens]
    layer_margin: float = 0.05      # ... by this much leaves [fraction]
    layer_quit: bool = True         # ... or at once when they lose to the target alone even read optimistically
    measure_loop: bool = True       # price a round's time beyond its decodes (the loop's Python)
    own_apart: bool = True          # the policy's own time priced on drafting rounds only (a pause skips it)
    monotone: bool = True           # fit verify costs that never fall with the batch size
    seeded_pause: bool = True       # start paused when what an earlier answer learned says drafting loses
    lone_guard: bool = True         # ... unless the costs that says it on were each one sample
    early_probe: bool = True        # ... and probes at once where the probe budget's gap fits in the last answer
    early_share: float = 0.25       # ... the next too on this share of its budget x what a step may save [fraction]
    carried_trial: bool = True      # carried acceptance a position's verdicts refute (odds of trial_z) is dropped;
                                    # all of it on a probe's resume where this text's counts read it easier
    trial_z: float = 1.0            # ... those odds, 1/(1 - Phi(trial_z)) (~6): lower than a pause's, as a
                                    # wrong drop costs only the carried evidence [standard deviations]
    carried_blend: bool = True      # the plain step's one fresh sample is averaged with its carried cost
    build_min: float = 0.5          # a batch size's first decode in a generation costing this share of its
                                    # later ones more is priced as a one-off (a GPU graph) [fraction]
    build_horizon: int = 128       # tokens a new batch size's first-decode extra must be repaid in [tokens]
    guard_decay: float = 0.85       # slots: the batch's rates keep this per sample (they follow the load) [factor]
    guard_min_draft: int = 6        # ... drafting rounds measured before a verdict [rounds]
    guard_min_plain: int = 2        # ... plain rounds measured before a verdict [rounds]
    guard_measure_every: int = 24   # ... while drafting, one plain round among this many [rounds]
    guard_margin: float = 0.03      # ... drafting must lose by more than this to be stopped [fraction]
    guard_off_rounds: int = 32      # ... the first gap with drafting stopped [rounds]
    guard_off_max: int = 512        # ... the longest gap [rounds]
    short_sync: int = 4             # a draft's first decode of at most this many tokens costs about one [tokens]
    ladder: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32)   # draft lengths chosen among [tokens]


DEFAULT = Params()
