"""Speculation that never loses: the default policy stops drafting when it does not pay and
keeps drafting when it does. The decisions come from measured costs, on real (tiny) models
whose costs differ by two orders of magnitude; no test asserts a speed."""

import json
import time

import pytest
from conftest import make_engine, run_cli, run_to_done

from localspec.engine import PolicyNote, SamplingConfig, Step

GREEDY = SamplingConfig(temperature=0.0)


def generate(target, draft, n=300, size_prior=True, **kw):
    """Target alone, then the default policy from nothing; the answers must agree.
    ``size_prior=False``: as when the two models sit on different devices (the draft's size
    then says nothing about its speed)."""
    from localspec.engine import memory

    memory.reset()   # from nothing: what earlier tests taught the store is not this test's subject
    with make_engine(target, draft, fixed_k=False, draft_max=8, p_min=None, **kw) as e:
        if not size_prior:
            e._draft_size_ratio = None
        toks = e.tokenize("The quick brown fox")
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=n, speculative=False)
        e.reset()
        done, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=n)
    assert done.token_ids == base.token_ids
    return done, events, done.policy


def test_expensive_draft_ends_up_target_only(cost_pairs):
    # Nothing known: the first rounds measure that the draft costs far more than the target.
    done, events, policy = generate(cost_pairs["small"], cost_pairs["big"], size_prior=False)
    s = done.summary
    assert s.acceptance_rate > 0.8, "the pair agrees; only the cost makes drafting lose"
    assert s.tokens_drafting_off >= 0.8 * s.n_generated, s
    assert s.pauses >= 1 and policy["state"] == "paused"
    assert policy["draft_cost_ratio"] > 5 and "of a target step" in policy["reason"]
    assert policy["probe_every_tokens"] > 100, "each probe would cost ~100 target steps: probes are rare"
    # On one device the draft's weights (~100x the target's) say so before anything is measured:
    # the answer starts paused, says why, and the draft never reads the prompt.
    done, events, policy = generate(cost_pairs["small"], cost_pairs["big"])
    notes = [ev for ev in events if isinstance(ev, PolicyNote)]
    assert notes and not notes[0].drafting and "cannot pay" in notes[0].reason
    assert done.summary.drafted == 0 and policy["probe_every_tokens"] > done.summary.n_generated


def test_a_paused_policy_sees_only_the_rounds_before_its_probes(cost_pairs, monkeypatch):
    """Paused on the losing pair (the draft ~100x the target), the default policy is asked about
    and shown only the round before each probe (and the probe); the rest go by as the target alone runs them,
    counted towards its next probe. The answer is the target's."""
    from localspec.engine import memory
    from localspec.engine.policy import AdaptivePolicy

    memory.reset()
    seen = []
    observe = AdaptivePolicy.observe
    monkeypatch.setattr(AdaptivePolicy, "observe", lambda self, r: seen.append(r.index) or observe(self, r))
    with make_engine(cost_pairs["small"], cost_pairs["big"], fixed_k=False, draft_max=8, p_min=None) as e:
        toks = e.tokenize("The quick brown fox")
        run_to_done(e, toks, sampling=GREEDY, max_tokens=200)       # learns that drafting loses
        seen.clear()
        e.reset()
        done, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=200)
    policy = done.policy
    rounds = [ev for ev in events if isinstance(ev, Step)]
    assert len(rounds) == done.summary.n_generated == 200 and done.summary.drafted == 0
    assert policy["state"] == "paused" and policy["probe_every_tokens"] > 200
    assert not seen, "no round comes before a probe in this answer"
    # the pause it starts in is said before the answer, not by asking about a first round
    kinds = [type(ev).__name__ for ev in events]
    assert kinds.index("PolicyNote") < kinds.index("PromptProcessed")
    memory.reset()


def test_cheap_accurate_draft_keeps_drafting(cost_pairs):
    done, _, policy = generate(cost_pairs["big"], cost_pairs["small"])
    s = done.summary
    assert s.tokens_drafting_on >= 0.9 * s.n_generated, s
    assert s.pauses <= 1
    assert s.tokens_per_step > 3
    assert policy["draft_cost_ratio"] < 0.3


def test_fixed_k_and_explicit_draft_max_force_drafting(cost_pairs):
    small, big = str(cost_pairs["small"]), str(cost_pairs["big"])
    common = ["run", "-m", small, "-d", big, "-p", "The quick brown fox", "-n", "120", "--temp", "0", "--json"]
    default = json.loads(run_cli(*common).stdout)["stats"]
    assert default["tokens_drafting_off"] > 60
    for extra in (["--fixed-k"], ["--draft-max", "4"]):
        r = run_cli(*common, *extra)
        assert r.returncode == 0, r.stderr
        stats = json.loads(r.stdout)["stats"]
        assert stats["tokens_drafting_off"] == 0, extra
        assert stats["drafted"] > 60, extra


def test_compare_shows_the_decision(cost_pairs):
    r = run_cli("compare", "-m", str(cost_pairs["small"]), "-d", str(cost_pairs["big"]), "-p", "The quick",
                "-n", "100")
    assert r.returncode == 0, r.stderr
    assert "drafting off for" in r.stdout
    assert "drafting paused" in r.stdout
    data = json.loads(run_cli("compare", "-m", str(cost_pairs["small"]), "-d", str(cost_pairs["big"]),
                              "-p", "The quick", "-n", "100", "--json").stdout)
    spec = data["speculative"]
    assert spec["tokens_drafting_off"] + spec["tokens_drafting_on"] == spec["n_generated"]
    assert spec["policy_notes"] and "paused" in spec["policy_notes"][0]
    assert data["policy"]["drafting"] is False


def test_a_pair_learned_once_starts_from_it(cost_pairs):
    """What a generation measured seeds the next one, in the same Engine and in a new process
    (learned.json): on the losing pair the next generation never drafts and says why."""
    from localspec.engine import memory

    memory.reset()
    with make_engine(cost_pairs["small"], cost_pairs["big"], fixed_k=False, draft_max=8, p_min=None) as e:
        e._draft_size_ratio = None      # measured, not inferred from the files' sizes
        toks = e.tokenize("The quick brown fox")
        first, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60)
        assert not first.policy["seeded"] and first.summary.drafted > 0
        again, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=60)
    for done in (again,):
        assert done.policy["seeded"] and done.summary.drafted == 0
        assert done.summary.tokens_drafting_off == done.summary.n_generated
        notes = [ev for ev in events if isinstance(ev, PolicyNote)]
        assert notes and "from the last run" in notes[0].reason and "drafting paused" in notes[0].reason
    stored = memory.load()
    assert len(stored) == 1 and next(iter(stored.values()))["drafter"] == "model"
    with make_engine(cost_pairs["small"], cost_pairs["big"], fixed_k=False, draft_max=8, p_min=None) as e:
        done, _ = run_to_done(e, e.tokenize("Another prompt"), sampling=GREEDY, max_tokens=40)
    assert done.policy["seeded"] and done.summary.drafted == 0
    memory.reset()


def test_a_paused_start_does_not_make_the_draft_read_the_prompt(cost_pairs):
    """Seeded paused on the losing pair, a new prompt costs the dearer draft nothing: it reads
    the context only when a probe or a resume needs it (then catching up as after a pause)."""
    from localspec.engine import memory

    memory.reset()
    with make_engine(cost_pairs["small"], cost_pairs["big"], fixed_k=False, draft_max=8, p_min=None) as e:
        e._draft_size_ratio = None      # measured, not inferred from the files' sizes
        toks = e.tokenize("The quick brown fox")
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60, speculative=False)
        run_to_done(e, toks, sampling=GREEDY, max_tokens=60)          # learns that drafting loses
        e.reset()
        before = e.draft_ctx.decode_seconds
        done, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60)
        assert done.policy["seeded"] and done.summary.drafted == 0
        assert e.draft_ctx.decode_seconds == before and e.draft_ctx.tokens == []
        assert done.token_ids == base.token_ids
        # Forced to draft again (fixed K), the draft catches up from whatever it holds.
        fixed, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60, adaptive=False)
        assert fixed.token_ids == base.token_ids and fixed.summary.drafted > 0
    memory.reset()


def test_the_chain_keeps_lookups_and_pauses_a_losing_draft_model(cost_pairs):
    """On the losing pair the chain's draft model pauses on its own while prompt lookups go on
    as they would alone (their misses are their rounds: the lookup's policy measures them);
    seeded with that, the next generation leaves the dearer draft alone (it does not read the
    prompt, nor draft), with the target's own output."""
    from localspec.engine import memory

    memory.reset()
    with make_engine(cost_pairs["small"], cost_pairs["big"], drafter="ngram+model", fixed_k=False, draft_max=8,
                     p_min=None) as e:
        toks = e.tokenize("The quick brown fox")
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=120, speculative=False)
        first, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=120)
        assert first.token_ids == base.token_ids
        assert first.policy["chain"] and not first.policy["model"]["drafting"]
        sources = {ev.source for ev in events if isinstance(ev, Step) and ev.drafted}
        assert sources <= {"ngram", "model"}
        lookups = [ev for ev in events if isinstance(ev, Step) and ev.source == "ngram"]
        assert lookups and first.policy["ngram"]["draft_step_seconds"] is not None
        e.reset()
        before = e.draft_ctx.decode_seconds
        second, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=120)
        assert second.policy["seeded"] and second.token_ids == base.token_ids
        assert e.draft_ctx.decode_seconds == before and e.draft_ctx.tokens == []
        # only lookups may draft (whether they pay on this toy target is the timer's call)
        assert {ev.source for ev in events if isinstance(ev, Step) and ev.drafted} <= {"ngram"}
        assert "draft model:" in second.summary.policy
    memory.reset()


def test_a_chain_round_is_the_lookups_when_only_the_lookup_looked(tiny_draft):
    """With the draft model paused, a lookup's miss is the lookup's round (one step, nothing
    drafted: its policy learns what misses cost); with both paused the lookup is not even
    called, and its index takes in what went by at its next lookup."""
    from types import SimpleNamespace

    from localspec.engine.backend import Context, Model
    from localspec.engine.chain import ChainDrafter
    from localspec.engine.drafters import ModelDrafter, NgramDrafter

    model = Model(tiny_draft)
    try:
        chain = ChainDrafter(NgramDrafter(), ModelDrafter(Context(model, n_ctx=256)))
        plan = SimpleNamespace(k_lookup=0, k_model=0, model_drafting=False, lookup_gate=lambda: None)
        chain.follow(plan)
        context = [5, 6, 7, 8, 9, 10, 11]
        rng = __import__("numpy").random.default_rng(0)
        d = chain.draft(context, 4, GREEDY, rng)
        assert (d.tokens, d.steps, d.source) == ([], 0, "") and chain.lookup._seen == []
        plan.k_lookup = 4
        d = chain.draft(context, 4, GREEDY, rng)                  # no earlier match: a miss
        assert (d.tokens, d.steps, d.source) == ([], 1, "ngram") and chain.lookup._seen == context
        d = chain.draft(context + [5, 6, 7], 4, GREEDY, rng)      # "5 6 7" was followed by "8 9 10 11"
        assert (d.tokens, d.source) == ([8, 9, 10, 11], "ngram")
        chain.model.close()
    finally:
        model.close()


def test_a_chain_whose_model_learned_nothing_starts_it_from_what_it_learned_alone(cost_pairs):
    """A chain's draft model that never drafted in it (its prompt read alongside outlasted
    every answer, say) leaves nothing learned for it, and each new chain started it cold: it
    read every prompt again, beside the target, and never drafted. It now starts from what
    the draft model learned alone: on the losing pair, paused, reading nothing."""
    from localspec.engine import DrafterKind, memory

    memory.reset()
    with make_engine(cost_pairs["small"], cost_pairs["big"], fixed_k=False, draft_max=8, p_min=None) as e:
        e._draft_size_ratio = None      # measured, not inferred from the files' sizes
        toks = e.tokenize("The quick brown fox")
        alone, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60)     # learns that drafting loses
        assert not alone.policy["drafting"]
        run_to_done(e, toks, sampling=GREEDY, max_tokens=60, drafter="ngram")
        lookups = e.memory.get(DrafterKind.NGRAM.value)
        assert lookups
        # What a chain whose model never drafted left: the lookups' state alone, or with the
        # target's costs its model measured (no draft cost); or a hand-damaged entry.
        target_only = {"version": 2, "costs": {"verify": {"1": 5e-5}, "draft_first": None}, "drafting": True,
                       "acceptance": {"beta": [1, 1], "positions": [[0, 0]] * 4}}
        for model in (None, target_only, "damaged"):
            e.memory.put(DrafterKind.NGRAM_MODEL.value, {"ngram": lookups, "model": model, "model_catchup": None})
            e.reset()
            before = e.draft_ctx.decode_seconds
            chain, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60, drafter="ngram+model")
            assert chain.policy["model"]["seeded"] and not chain.policy["model"]["drafting"]
            assert e.draft_ctx.decode_seconds == before, "the paused model read nothing"
    memory.reset()


def test_lookups_alone_and_in_a_chain_start_from_what_either_learned_last(cost_pairs):
    """A chain's lookups are the lookups alone: one drafter (one record of which match lengths
    the target accepts) and one learned state, so switching between them starts each from
    what the other measured rather than from its own older state."""
    from localspec.engine import DrafterKind, memory

    memory.reset()
    with make_engine(cost_pairs["small"], cost_pairs["big"], fixed_k=False, draft_max=8, p_min=None) as e:
        assert e.drafter(DrafterKind.NGRAM) is e.drafter(DrafterKind.NGRAM_MODEL).lookup
        toks = e.tokenize("The quick brown fox")
        alone, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60, drafter="ngram")
        assert not alone.policy["seeded"]
        first = e.memory.get(DrafterKind.NGRAM.value)
        assert first
        chain, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60, drafter="ngram+model")
        assert chain.policy["ngram"]["seeded"]
        kept = e.memory.get(DrafterKind.NGRAM_MODEL.value)
        assert kept is not None and "ngram" not in kept          # the lookups' part is theirs
        after = e.memory.get(DrafterKind.NGRAM.value)
        assert after and after is not first                      # ... and the chain's lookups wrote it
        # (the same values when the lookups were paused throughout: nothing new measured)
        again, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60, drafter="ngram")
        assert again.policy["seeded"]                             # from what the chain's lookups wrote
        assert e.memory.get(DrafterKind.NGRAM.value) is not None
    memory.reset()


def test_a_lookup_match_the_model_drafts_instead_is_judged_by_what_the_target_emits(tiny_draft):
    """A plan that gives the round to the draft model although the lookup found a match: the
    model drafts, and the lookup's proposal is judged once the target's tokens decide it
    (its leading tokens that match, up to the first that does not); a context that is no
    extension of the last drops what is held."""
    from types import SimpleNamespace

    import numpy as np

    from localspec.engine.backend import Context, Model
    from localspec.engine.chain import ChainDrafter
    from localspec.engine.drafters import ModelDrafter, NgramDrafter

    model = Model(tiny_draft)
    judged = []
    try:
        chain = ChainDrafter(NgramDrafter(), ModelDrafter(Context(model, n_ctx=256)))
        plan = SimpleNamespace(k_lookup=4, k_model=3, model_drafting=True, lookup_drafting=True, lookup_first=False,
                               lookup_gate=lambda: None,
                               lookup_unused=lambda k, drafted, accepted: judged.append((k, drafted, accepted)))
        chain.follow(plan)
        rng = np.random.default_rng(0)
        context = [5, 6, 7, 8, 9, 10, 11, 5, 6, 7]      # the lookup proposes 8 9 10 11
        chain.prefill(context)
        d = chain.draft(context, 4, GREEDY, rng)
        assert d.source == "model" and 1 <= len(d.tokens) <= 3 and d.steps >= 1
        assert chain.lookups == 0 and judged == []
        d = chain.draft(context + [8], 4, GREEDY, rng)    # one token emitted: not decided yet
        assert judged == []
        chain.draft(context + [8, 9, 42], 4, GREEDY, rng)
        assert judged[0] == (4, 4, 2)
        judged.clear()
        plan.lookup_first = True
        d = chain.draft(context, 4, GREEDY, rng)          # the lookups' round again
        assert d.source == "ngram" and d.tokens == [8, 9, 10, 11] and chain.lookups == 1
        plan.lookup_first = False
        chain.draft(context, 4, GREEDY, rng)
        chain.draft([1, 2], 4, GREEDY, rng)                # a shorter context: nothing left to judge
        assert not chain._unused and judged == []
        chain.model.close()
    finally:
        model.close()


def test_ngram_lookups_are_measured_by_the_policy(tiny_target):
    """Prompt lookup reports its lookups as drafting steps: the policy knows their cost, and
    what a lookup round costs beyond the decodes (next to this toy's ~0.1 ms target step the
    loop's Python decides whether lookups that find little pay)."""
    with make_engine(tiny_target, drafter="ngram", fixed_k=False, draft_max=8, p_min=None) as e:
        done, events = run_to_done(e, e.tokenize("one two three one two three one two"), sampling=GREEDY,
                                   max_tokens=80)
    assert done.policy["draft_step_seconds"] is not None and done.policy["draft_cost_ratio"] < 1
    lookups = [ev for ev in events if isinstance(ev, Step) and ev.k > 0 and ev.draft_steps > 0]
    assert lookups
    beyond = done.policy["round_seconds_beyond_decodes"]
    assert beyond["plain"] is not None and (beyond["drafting"] is not None or len(lookups) == 1)


def test_chain_drafter_is_lossless_and_uses_both(tiny_target, tiny_draft):
    """Prompt lookup first, the draft model when it finds nothing: greedy output is the
    target's, and both sources drafted."""
    from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec

    with Engine(EngineConfig(target=str(tiny_target), draft=str(tiny_draft), n_ctx=512, remember=False)) as e:
        assert DrafterKind.NGRAM_MODEL in e.drafters
        toks = e.tokenize("The quick brown fox jumps over the lazy dog")
        spec = RunSpec(drafter=DrafterKind.NGRAM_MODEL, adaptive=False, draft_max=4, sampling=GREEDY,
                       max_tokens=150)
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=150, speculative=False)
        events = list(e.run(toks, spec))
        done = events[-1]
        chain = e.drafter(DrafterKind.NGRAM_MODEL)
    assert done.token_ids == base.token_ids
    assert done.summary.drafter == "ngram+model"
    steps = [ev for ev in events if type(ev).__name__ == "Step" and ev.drafted]
    assert 0 < chain.lookups < len(steps), (chain.lookups, len(steps))


def test_chain_flag(tiny_target, tiny_draft):
    r = run_cli("run", "-m", str(tiny_target), "-d", str(tiny_draft), "--chain", "-p", "The quick brown fox",
                "-n", "30", "--temp", "0", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stats"]["drafter"] == "ngram+model"
    bad = run_cli("run", "-m", str(tiny_target), "--ngram", "--chain", "-p", "x", "-n", "4")
    assert bad.returncode != 0 and "--chain" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    nodraft = run_cli("run", "-m", str(tiny_target), "--chain", "-p", "x", "-n", "4")
    assert nodraft.returncode != 0 and "draft model" in nodraft.stderr


def test_draft_catches_up_fully_when_its_measured_cost_says_it_is_cheap(tiny_draft):
    """After a long pause the draft model re-reads everything it missed when catching up costs
    no more than a few of its own decodes (measured), and only a window otherwise."""
    import numpy as np

    from localspec.engine.backend import Context, Model
    from localspec.engine.drafters import ModelDrafter

    model = Model(str(tiny_draft), gpu_layers=0)
    try:
        prompt = [int(t) for t in np.random.default_rng(0).integers(5, 200, 120)]
        missed = [int(t) for t in np.random.default_rng(1).integers(5, 200, 150)]
        for steps, full in ((1e6, True), (0.0, False)):
            ctx = Context(model, n_ctx=1024, threads=1)
            d = ModelDrafter(ctx, catchup_steps=steps)
            d.prefill(prompt)                       # a batch: its cost per token is measured
            d.draft(prompt, 4, GREEDY, None)        # one-token decodes: their cost is measured
            assert d._per_token is not None and d._per_step is not None
            out = d.draft(prompt + missed, 4, GREEDY, None)   # 150 tokens behind
            assert out.tokens
            if full:
                assert d.offset == 0 and ctx.tokens[:len(prompt)] == prompt
                assert out.sync_tokens >= len(missed)
            else:
                assert d.offset > 0 and out.sync_tokens == d.window
            ctx.close()
    finally:
        model.close()


def test_drafting_that_starts_paused_catches_up_when_it_resumes(tiny_target, tiny_draft):
    """A generation that starts paused (no prompt read by the draft) and resumes drafting later
    stays the target's output, and the draft reads the context on its first draft."""
    from localspec.engine import DrafterKind
    from localspec.engine.policy import FixedPolicy

    class PausedThenDrafting(FixedPolicy):
        def __init__(self):
            super().__init__(4)
            self.drafting = False
            self.rounds = 0

        def next_k(self):
            return 4 if self.drafting else 0

        def observe(self, r):
            self.rounds += 1
            if self.rounds == 10:
                self.drafting = True
            return None

    with make_engine(tiny_target, tiny_draft) as e:
        toks = e.tokenize("The quick brown fox jumps over the lazy dog")
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=80, speculative=False)
        e.reset()
        spec = e.test_spec.with_(sampling=GREEDY, max_tokens=80)
        events = list(e._generator(DrafterKind.MODEL).generate(toks, spec, PausedThenDrafting()))
        done = events[-1]
    assert done.token_ids == base.token_ids
    assert done.summary.drafted > 0 and done.summary.accepted > 0
    assert done.summary.tokens_drafting_off >= 9


def slow_target(engine, monkeypatch, seconds=0.002):
    """Give the toy target a real model's pace (a sleep in each decode, which lets other
    threads run): its steps are otherwise over before a thread alongside gets a turn."""
    real = engine.target_ctx._decode

    def decode(tokens, logits):
        time.sleep(seconds)
        return real(tokens, logits)

    monkeypatch.setattr(engine.target_ctx, "_decode", decode)


def test_the_draft_reads_the_prompt_alongside_the_target(tiny_target, tiny_draft, monkeypatch):
    """With cores to spare the draft decodes the prompt on a thread of its own while the target
    reads it: the output is the target's, the read is not counted as the loop's decode time,
    and the draft's cache ends up exact (later turns reuse it)."""
    from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec

    with Engine(EngineConfig(target=str(tiny_target), draft=str(tiny_draft), n_ctx=1024, threads=1,
                             remember=False, read_alongside=True)) as e:
        assert e.describe()["draft"]["reads_prompt_alongside"] is True
        toks = e.tokenize("The quick brown fox jumps over the lazy dog. " * 20)
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=80, speculative=False)
        slow_target(e, monkeypatch)
        drafter = e.drafter(DrafterKind.MODEL)
        for kind in (DrafterKind.MODEL, DrafterKind.NGRAM_MODEL):
            e.reset()
            before = (drafter.alongside_seconds, e.draft_ctx.decode_seconds)
            done = list(e.run(toks, RunSpec(drafter=kind, sampling=GREEDY, max_tokens=80, adaptive=False,
                                            draft_max=4)))[-1]
            assert done.token_ids == base.token_ids, kind
            assert drafter.alongside_seconds > before[0] and drafter.ready
            # the loop's decode time holds the draft's own draft steps, not its prompt read
            assert e.draft_ctx.decode_seconds - before[1] < done.summary.generation_seconds
            assert e.draft_ctx.tokens[:len(toks) - 1] == toks[:-1]


def test_a_catch_up_of_known_length_is_waited_for_when_no_plain_step_is_measured(tiny_target, tiny_draft):
    """A fixed K measures no plain step: the budget is infinite, and a catch-up alongside whose
    length is known is waited for to its end. The wait's timeout was the budget itself, which
    a lock cannot take (OverflowError, seen once in a full run when a read was still going)."""
    import math
    import threading

    from localspec.engine import DrafterKind, Engine, EngineConfig

    with Engine(EngineConfig(target=str(tiny_target), draft=str(tiny_draft), n_ctx=512, threads=1,
                             remember=False, read_alongside=True)) as e:
        drafter = e.drafter(DrafterKind.MODEL)
        toks = e.tokenize("The quick brown fox jumps over the lazy dog.")
        read = drafter._reader = threading.Thread(target=time.sleep, args=(0.2,), daemon=True)
        read.start()
        drafter._done_at = time.perf_counter() + 0.05     # a read of known length, nearly done
        assert not drafter.busy_beyond(math.inf)
        drafter._defer(toks, math.inf)    # (then, the cache behind, a catch-up of its own starts)
        assert not read.is_alive()


def test_a_failed_read_alongside_is_a_clear_error_and_the_engine_goes_on(tiny_target, tiny_draft, monkeypatch):
    from localspec.engine import Engine, EngineConfig, RunSpec
    from localspec.errors import LocalspecError

    with Engine(EngineConfig(target=str(tiny_target), draft=str(tiny_draft), n_ctx=512, threads=1,
                             remember=False, read_alongside=True)) as e:
        toks = e.tokenize("The quick brown fox")
        real = e.draft_ctx.decode

        def broken(tokens, *, logits="last"):
            raise LocalspecError("llama_decode failed (simulated)")

        monkeypatch.setattr(e.draft_ctx, "decode", broken)
        with pytest.raises(LocalspecError, match="simulated"):
            list(e.run(toks, RunSpec(sampling=GREEDY, max_tokens=20, adaptive=False, draft_max=4)))
        monkeypatch.setattr(e.draft_ctx, "decode", real)
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=20, speculative=False)
        done = list(e.run(toks, RunSpec(sampling=GREEDY, max_tokens=20, adaptive=False, draft_max=4)))[-1]
        assert done.token_ids == base.token_ids


def test_a_draft_far_behind_catches_up_alongside_and_leaves_the_round_to_the_target(tiny_draft, monkeypatch):
    """Given the seconds of the plain target step it would replace, a draft whose catch-up
    would cost more starts it on its own thread and proposes nothing (no decode: a plain
    step); its next draft finds the cache caught up and decodes little. Without a budget, or
    when the catch-up is cheap, it catches up in line as before; a failed catch-up is raised
    by the next draft."""
    import numpy as np

    from localspec.engine.backend import Context, Model
    from localspec.engine.drafters import ModelDrafter
    from localspec.errors import LocalspecError

    model = Model(str(tiny_draft), gpu_layers=0)
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(5, 200, 60)]
    missed = [int(t) for t in rng.integers(5, 200, 40)]
    context = prompt + missed
    try:
        ctx = Context(model, n_ctx=512, threads=1)
        d = ModelDrafter(ctx)
        d.prefill(prompt)                        # a batch: its cost per token is measured
        assert d._per_token is not None
        d.draft(prompt, 4, GREEDY, None)
        out = d.draft(context, 4, GREEDY, None, budget=1e-9)
        assert out.tokens == [] and out.steps == 0
        d.settle()
        out = d.draft(context, 4, GREEDY, None, budget=1e-9)   # caught up: nothing left to defer
        assert out.tokens and out.sync_tokens <= 2
        assert ctx.tokens[:len(context)] == context
        # cheap enough for the budget: in line, in one round
        more = context + [int(t) for t in rng.integers(5, 200, 12)]
        out = d.draft(more, 4, GREEDY, None, budget=1e3)
        assert out.tokens and out.steps > 0 and out.sync_tokens >= 12
        # a catch-up that fails on its thread is the next draft's clear error
        later = more + [int(t) for t in rng.integers(5, 200, 30)]

        def broken(tokens, *, logits="last"):
            raise LocalspecError("llama_decode failed (simulated)")

        monkeypatch.setattr(ctx, "decode", broken)
        assert d.draft(later, 4, GREEDY, None, budget=1e-9).steps == 0
        with pytest.raises(LocalspecError, match="simulated"):
            d.draft(later, 4, GREEDY, None)
    finally:
        d.close()
        model.close()


def test_a_draft_whose_tokens_were_all_accepted_is_not_behind(tiny_draft):
    """After a round whose draft the target accepted whole, the cache already holds all but
    the last drafted token: the next draft decodes that one and the target's bonus token in
    line, however small the budget, and never leaves the round to the target as if it had
    the whole draft to catch up on."""
    import numpy as np

    from localspec.engine.backend import Context, Model
    from localspec.engine.drafters import ModelDrafter

    model = Model(str(tiny_draft), gpu_layers=0)
    rng = np.random.default_rng(1)
    prompt = [int(t) for t in rng.integers(5, 200, 60)]
    try:
        ctx = Context(model, n_ctx=512, threads=1)
        d = ModelDrafter(ctx)
        d.prefill(prompt)                        # a batch: its cost per token is measured
        assert d._per_token is not None
        context = list(prompt)
        for _ in range(3):
            out = d.draft(context, 8, GREEDY, None, budget=1e-9)
            assert len(out.tokens) == 8 and out.steps == 8, "deferred as if far behind"
            assert out.sync_tokens <= 2
            context = context + out.tokens + [7]   # all accepted, and the target's bonus token
    finally:
        d.close()
        model.close()


def test_a_chain_catches_the_model_up_alongside_its_lookups(tiny_target, tiny_draft, monkeypatch):
    """With cores to spare, each round the lookup drafts also starts the draft model catching
    up on the tokens emitted so far, on its own thread while the target verifies; the output
    stays the target's and the draft's cache exact."""
    from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec
    from localspec.engine.drafters import ModelDrafter

    started = []
    real = ModelDrafter._start_thread

    def record(self, work, *, prompt, **kw):
        started.append((prompt, len(work()) if not prompt else None))
        return real(self, work, prompt=prompt, **kw)

    monkeypatch.setattr(ModelDrafter, "_start_thread", record)
    with Engine(EngineConfig(target=str(tiny_target), draft=str(tiny_draft), n_ctx=1024, threads=1,
                             remember=False, read_alongside=True)) as e:
        toks = e.tokenize("one two three four five six seven eight nine ten. " * 12)
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=120, speculative=False)
        slow_target(e, monkeypatch)
        e.reset()
        events = list(e.run(toks, RunSpec(drafter=DrafterKind.NGRAM_MODEL, sampling=GREEDY, max_tokens=120,
                                          adaptive=False, draft_max=4)))
        done = events[-1]
        assert done.token_ids == base.token_ids
        lookups = [ev for ev in events if isinstance(ev, Step) and ev.source == "ngram"]
        assert lookups, "the text repeats: the lookup drafts"
        assert any(not prompt and n > 0 for prompt, n in started), started
        seq = list(toks) + list(done.token_ids)
        n = min(len(e.draft_ctx.tokens), len(seq))
        assert e.draft_ctx.tokens[:n] == seq[:n]


def test_a_probe_left_to_the_target_while_the_draft_catches_up_is_not_spent(tiny_target, tiny_draft):
    """A probe whose draft only started catching up (nothing drafted, no decode) is not a failed
    probe: the step says it was no probe, and the probe comes again when the draft is ready."""
    from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec
    from localspec.engine.policy import FixedPolicy

    class ProbesOnce(FixedPolicy):
        def __init__(self):
            super().__init__(4)
            self.drafting = False
            self.rounds = 0
            self.probed = False

        def next_k(self):
            self.probe = self.rounds >= 10 and not self.probed
            return 4 if self.probe else 0

        def plain_step_seconds(self):
            return 1e-9            # any catch-up costs more than a plain step

        def observe(self, r):
            self.rounds += 1
            self.probed = self.probed or r.probe
            if r.k and not r.draft_steps:
                drafter.settle()   # the toy target's steps are too quick to give the thread a turn
            return None

    with Engine(EngineConfig(target=str(tiny_target), draft=str(tiny_draft), n_ctx=1024, threads=1,
                             remember=False, read_alongside=True)) as e:
        drafter = e.drafter(DrafterKind.MODEL)
        toks = e.tokenize("The quick brown fox jumps over the lazy dog")
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=60, speculative=False)
        e.reset()
        spec = RunSpec(sampling=GREEDY, max_tokens=60, adaptive=False, draft_max=4)
        events = list(e._generator(DrafterKind.MODEL).generate(toks, spec, ProbesOnce()))
    steps = [ev for ev in events if isinstance(ev, Step) and ev.k > 0]
    assert events[-1].token_ids == base.token_ids
    assert steps[0].draft_steps == 0 and not steps[0].probe and steps[0].drafted == 0
    probes = [s for s in steps if s.probe]
    assert len(probes) == 1 and probes[0].draft_steps > 0 and probes[0].drafted > 0


def test_a_generation_that_ends_stops_a_read_alongside_without_waiting(tiny_draft):
    """A read alongside still running when its generation ends is stopped after its current
    chunk, not waited for; the cache keeps what it decoded, consistent, and the next draft
    reads the rest."""
    import numpy as np

    from localspec.engine.backend import Context, Model
    from localspec.engine.drafters import ModelDrafter

    model = Model(str(tiny_draft), gpu_layers=0)
    prompt = [int(t) for t in np.random.default_rng(2).integers(5, 200, 1500)]
    try:
        ctx = Context(model, n_ctx=2048, threads=1)
        d = ModelDrafter(ctx)
        d._per_token = 1.0                 # as if each token took a second: chunks of a few tokens
        assert d.read_alongside(prompt)
        d.settle(wait=False)               # the generation ended
        d.settle()                         # the next use waits for the chunk in flight only
        assert len(ctx.tokens) < len(prompt) - 1
        assert ctx.tokens == prompt[:len(ctx.tokens)]
        kept = len(ctx.tokens)
        d._per_token, d._per_step = 1e-6, 1e-3   # the real costs: reading the rest is cheap
        out = d.draft(prompt, 4, GREEDY, None)
        assert out.tokens and out.sync_tokens == len(prompt) - kept
        assert ctx.tokens[:len(prompt)] == prompt
        # a new prompt while a stopped read still runs: the new read waits for it on its own
        # thread, and the cache ends up holding the new prompt
        d._per_token = 1.0
        other = prompt[:700] + [int(t) for t in np.random.default_rng(3).integers(5, 200, 600)]
        assert d.read_alongside(prompt[:1200] + [7])
        d.settle(wait=False)
        assert d.read_alongside(other)
        d.settle()
        assert ctx.tokens == other[:-1]
    finally:
        d.close()
        model.close()


_EXIT_MID_READ = """
import sys
import numpy as np
from localspec.engine.backend import Context, Model
from localspec.engine.drafters import ModelDrafter
ctx = Context(Model(sys.argv[1], gpu_layers=0), n_ctx=2048, threads=1)
d = ModelDrafter(ctx)
d._per_token = 1.0   # chunks of the smallest size: the exit often falls between two decodes
assert d.read_alongside([int(t) for t in np.random.default_rng(2).integers(5, 200, 1500)])
assert not d.ready
"""


def test_a_script_that_exits_mid_read_exits_cleanly(smollm2_q4_1):
    """A script that never closes its Engine may exit while the draft reads alongside; the
    read decoding on while llama.cpp is torn down crashed the process (a segfault in 4 of 6
    runs before the read was stopped at exit)."""
    import subprocess
    import sys

    for _ in range(4):
        proc = subprocess.run([sys.executable, "-c", _EXIT_MID_READ, str(smollm2_q4_1)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])


def test_a_seeded_sampled_generation_reads_in_line_and_repeats_itself(tiny_target, tiny_draft, monkeypatch):
    """Which rounds draft would depend on a thread's timing if the draft read alongside; a
    seeded sampled generation must repeat itself, so its draft reads in line (greedy output
    is the target's whatever drafts, and unseeded sampling is random anyway)."""
    from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec

    with Engine(EngineConfig(target=str(tiny_target), draft=str(tiny_draft), n_ctx=1024, threads=1,
                             remember=False, read_alongside=True)) as e:
        slow_target(e, monkeypatch, 0.0005)
        drafter = e.drafter(DrafterKind.MODEL)
        toks = e.tokenize("The quick brown fox jumps over the lazy dog. " * 10)
        seeded = SamplingConfig(temperature=0.9, seed=7)
        outs = []
        for _ in range(3):
            e.reset()
            before = drafter.alongside_seconds
            done = list(e.run(toks, RunSpec(sampling=seeded, max_tokens=40, adaptive=False, draft_max=3)))[-1]
            assert drafter.alongside_seconds == before
            outs.append(done.token_ids)
        assert outs[0] == outs[1] == outs[2]
        e.reset()
        list(e.run(toks, RunSpec(sampling=SamplingConfig(temperature=0.9), max_tokens=40, adaptive=False,
                                 draft_max=3)))
        e.reset()
        assert drafter.alongside_seconds > 0     # unseeded: the draft reads alongside


def test_a_prompt_read_alongside_is_not_waited_for_before_the_plain_step_is_known(tiny_draft, tiny_target,
                                                                                   monkeypatch):
    """Before any plain step is measured the budget is infinite; a read of unknown length (the
    prompt's) must still leave the round to the target rather than be waited for: in a chain
    the first model round once waited 0.4 s for the demo draft's prompt read, and the policy
    took that wait for the draft's cost (3.7 target steps a draft step) and paused it."""
    import math
    import threading

    import numpy as np

    from localspec.engine.backend import Context, Model
    from localspec.engine.chain import ChainDrafter
    from localspec.engine.drafters import ModelDrafter, NgramDrafter

    model = Model(str(tiny_draft), gpu_layers=0)
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(5, 200, 60)]
    release = threading.Event()
    try:
        ctx = Context(model, n_ctx=512, threads=1)
        real = ctx.decode

        def held(tokens, *, logits="last"):
            if logits == "none":
                release.wait(10)      # the prompt's read: as slow as the test wants
            return real(tokens, logits=logits)

        monkeypatch.setattr(ctx, "decode", held)
        d = ModelDrafter(ctx)
        d.read_alongside(prompt)
        assert not d.ready and d.busy_for() == math.inf
        out = d.draft(prompt, 4, GREEDY, None, budget=math.inf)
        assert out.steps == 0 and out.tokens == [] and not d.ready, "not waited for"
        chain = ChainDrafter(NgramDrafter(), d)
        out = chain.draft(prompt, 4, GREEDY, None, budget=math.inf)
        assert out.tokens == [] and out.source == "ngram" and not d.ready   # the lookup missed: a plain step
        release.set()
        d.settle()
        out = d.draft(prompt, 4, GREEDY, None, budget=math.inf)
        assert out.tokens and out.sync_tokens <= 2
    finally:
        release.set()
        d.close()
        model.close()


def test_a_catch_up_nearly_done_is_waited_for_no_longer_than_a_plain_step(tiny_draft, monkeypatch):
    """A catch-up alongside that should be done within the budget (a plain target step) but
    runs slower than its measured rate (a busy machine): the round waits for it at most the
    budget, then is the target's; a round that waited for the whole read lost ~55 ms, five
    of the demo pair's target steps, at the end of a chain's answer."""
    import threading

    import numpy as np

    from localspec.engine.backend import Context, Model
    from localspec.engine.drafters import ModelDrafter

    model = Model(str(tiny_draft), gpu_layers=0)
    rng = np.random.default_rng(0)
    context = [int(t) for t in rng.integers(5, 200, 80)]
    release = threading.Event()
    d = None
    try:
        ctx = Context(model, n_ctx=512, threads=1)
        d = ModelDrafter(ctx)
        d.prefill(context[:40])
        real = ctx.decode

        def held(tokens, *, logits="last"):
            if logits == "none":
                release.wait(10)      # the catch-up: as slow as the test wants
            return real(tokens, logits=logits)

        monkeypatch.setattr(ctx, "decode", held)
        d._per_token = 1e-6                      # measured as fast: "nearly done" at once
        d.catch_up_alongside(context)
        assert not d.ready and d.busy_for() < 0.01
        t0 = time.perf_counter()
        out = d.draft(context, 4, GREEDY, None, budget=0.05)
        waited = time.perf_counter() - t0
        assert out.steps == 0 and out.tokens == [] and not d.ready
        assert 0.04 <= waited < 1.0
        release.set()
        out = d.draft(context, 4, GREEDY, None, budget=0.05)
        assert out.tokens and out.steps >= 1
    finally:
        release.set()
        if d is not None:
            d.close()
        model.close()


def test_a_context_closed_under_a_running_read_ends_it_with_an_error(tiny_draft):
    """Closing a context waits for the decode in flight on another thread; the next decode
    there raises a clear error instead of using freed memory (the process lives on)."""
    import threading

    import numpy as np

    from localspec.engine.backend import Context, Model
    from localspec.errors import LocalspecError

    model = Model(str(tiny_draft), gpu_layers=0)
    try:
        ctx = Context(model, n_ctx=2048, threads=1)
        tokens = [int(t) for t in np.random.default_rng(4).integers(5, 200, 2000)]
        started, outcome = threading.Event(), []

        def read():
            try:
                for t in tokens:
                    ctx.decode([t], logits="none")
                    started.set()
                outcome.append("finished")
            except LocalspecError as exc:
                outcome.append(str(exc))

        reader = threading.Thread(target=read)
        reader.start()
        assert started.wait(30)
        ctx.close()
        reader.join(30)
        assert not reader.is_alive()
        assert outcome == ["the context is closed"]
        assert ctx.ptr is None
    finally:
        model.close()
