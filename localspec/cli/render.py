"""Plain-text lines for generation statistics (stderr of ``run``, the body of ``compare``)."""

from __future__ import annotations

from ..engine.events import Summary


def speed_line(s: Summary) -> str:
    return (f"{s.n_generated} tokens in {s.generation_seconds:.2f} s: {s.tokens_per_second:.1f} tok/s "
            f"(prompt {s.n_prompt} tokens in {s.prompt_seconds:.2f} s"
            f"{f', {s.n_cached} cached' if s.n_cached else ''}; first token after "
            f"{s.time_to_first_token:.2f} s)")


def draft_line(s: Summary) -> str:
    if s.drafter == "none" or (s.drafted == 0 and s.tokens_drafting_on == 0 and not s.tokens_drafting_off):
        return f"target only; stop: {s.stop_reason}"
    by_pos = " ".join(f"{p:.0%}" for p in s.acceptance_by_position[:8])
    line = (f"drafter {s.drafter}: acceptance {s.acceptance_rate:.1%} ({s.accepted}/{s.drafted}), "
            f"{s.tokens_per_step:.2f} tokens per step, by position [{by_pos}]")
    if len(s.by_drafter) > 1:
        line += " (" + ", ".join(f"{name} {d['accepted']}/{d['drafted']}" for name, d in s.by_drafter.items()) + ")"
    if s.tokens_drafting_off:
        line += f"; drafting off for {s.tokens_drafting_off} of {s.n_generated} tokens"
    return line + f"; stop: {s.stop_reason}"


def policy_line(s: Summary) -> str:
    return f"policy: {s.policy}"


def memory_line(s: Summary) -> str:
    """For recurrent/hybrid models: how rejected tails were rolled back, and what it cost."""
    if s.target_memory in ("", "kv") and s.draft_memory in ("", "kv"):
        return ""
    return (f"state rollback: target {s.target_memory}, draft {s.draft_memory or '-'}; {s.checkpoints} checkpoints "
            f"({s.checkpoint_size / 1024:.0f} KB each, {s.checkpoint_bytes / 1e6:.1f} MB copied), "
            f"{s.rollbacks} rollbacks, {s.redecoded_tokens} tokens decoded again, "
            f"{s.checkpoint_seconds * 1000:.1f} ms")
