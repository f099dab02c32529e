"""Accumulates per-step figures into the final :class:`Summary` of a generation."""

from __future__ import annotations

from .events import Step, Summary


class StatsRecorder:
    def __init__(self, drafter: str, policy: str, seed: int | None):
        self.s = Summary(drafter=drafter, policy=policy, seed=seed)
        self._drafted_at: list[int] = []   # rounds that drafted at least i+1 tokens
        self._accepted_at: list[int] = []  # rounds that accepted at least i+1 tokens
        self.rounds_drafting = 0

    def prompt(self, n_tokens: int, n_cached: int, seconds: float) -> None:
        self.s.n_prompt = n_tokens
        self.s.n_cached = n_cached
        self.s.prompt_seconds = seconds

    def note(self, text: str) -> None:
        if len(self.s.policy_notes) < 50:
            self.s.policy_notes.append(text)

    def first_token(self, seconds_since_start: float) -> None:
        self.s.time_to_first_token = seconds_since_start

    def step(self, r: Step) -> None:
        s = self.s
        s.steps += 1
        s.n_generated += r.emitted
        s.drafted += r.drafted
        s.accepted += r.accepted
        s.draft_seconds += r.draft_seconds
        s.verify_seconds += r.verify_seconds
        s.k_max = max(s.k_max, r.k)
        if r.drafting:
            s.tokens_drafting_on += r.emitted
        else:
            s.tokens_drafting_off += r.emitted
        if r.drafted:
            self._tally(r.source or s.drafter, r.drafted, r.accepted)
            if r.helper_blocks:   # a layered round: the small draft's proposals to the large one
                self._tally("small_for_large", sum(n for n, _ in r.helper_blocks),
                            sum(a for _, a in r.helper_blocks))
            self.rounds_drafting += 1
            while len(self._drafted_at) < r.drafted:
                self._drafted_at.append(0)
                self._accepted_at.append(0)
            for i in range(r.drafted):
                self._drafted_at[i] += 1
            for i in range(r.accepted):
                self._accepted_at[i] += 1

    def _tally(self, name: str, drafted: int, accepted: int) -> None:
        """One round's drafted and accepted tokens, counted under ``name`` in ``by_drafter``."""
        mine = self.s.by_drafter.get(name)
        if mine is None:
            mine = self.s.by_drafter[name] = {"drafted": 0, "accepted": 0, "rounds": 0}
        mine["drafted"] += drafted
        mine["accepted"] += accepted
        mine["rounds"] += 1

    def rollback(self, target_mode: str, draft_mode: str | None, delta: dict, redecoded: int) -> None:
        s = self.s
        s.target_memory = target_mode
        s.draft_memory = draft_mode or ""
        s.checkpoints = delta.get("checkpoints", 0) + delta.get("draft_checkpoints", 0)
        s.checkpoint_bytes = delta.get("bytes", 0) + delta.get("draft_bytes", 0)
        s.checkpoint_size = max(delta.get("last_bytes", 0), delta.get("draft_last_bytes", 0))
        s.checkpoint_seconds = delta.get("seconds", 0.0) + delta.get("draft_seconds", 0.0)
        s.rollbacks = delta.get("rollbacks", 0) + delta.get("draft_rollbacks", 0)
        s.restarts = delta.get("restarts", 0) + delta.get("draft_restarts", 0)
        s.redecoded_tokens = redecoded

    def finish(self, generation_seconds: float, decode_seconds: float, stop_reason: str,
               policy) -> Summary:
        s = self.s
        s.generation_seconds = generation_seconds
        s.tokens_per_second = s.n_generated / generation_seconds if generation_seconds > 0 else 0.0
        s.acceptance_rate = s.accepted / s.drafted if s.drafted else 0.0
        s.mean_accepted_length = s.accepted / self.rounds_drafting if self.rounds_drafting else 0.0
        s.tokens_per_step = s.n_generated / s.steps if s.steps else 0.0
        s.acceptance_by_position = [round(a / d, 4) if d else 0.0
                                    for a, d in zip(self._accepted_at, self._drafted_at)]
        s.decode_seconds = decode_seconds
        s.overhead_fraction = max(0.0, 1.0 - decode_seconds / generation_seconds) if generation_seconds > 0 else 0.0
        s.stop_reason = stop_reason
        s.policy = f"{policy.describe()}; {policy.reason}" if policy.reason else policy.describe()
        s.pauses = policy.pauses
        s.probes = policy.probes
        return s
