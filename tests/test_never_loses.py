"""Speculation that never loses: the default policy stops drafting when it does not pay and
keeps drafting when it does. The decisions come from measured costs, on real (tiny) models
whose costs differ by two orders of magnitude; no test asserts a speed."""

import json

from conftest import make_engine, run_cli, run_to_done

from localspec.engine import PolicyNote, SamplingConfig

GREEDY = SamplingConfig(temperature=0.0)


def generate(target, draft, n=300, **kw):
    with make_engine(target, draft, fixed_k=False, draft_max=8, p_min=None, **kw) as e:
        toks = e.tokenize("The quick brown fox")
        base, _ = run_to_done(e, toks, sampling=GREEDY, max_tokens=n, speculative=False)
        e.reset()
        done, events = run_to_done(e, toks, sampling=GREEDY, max_tokens=n)
    assert done.token_ids == base.token_ids
    return done, events, done.policy


def test_expensive_draft_ends_up_target_only(cost_pairs):
    done, events, policy = generate(cost_pairs["small"], cost_pairs["big"])
    s = done.summary
    assert s.acceptance_rate > 0.9, "the pair agrees; only the cost makes drafting lose"
    assert s.tokens_drafting_off >= 0.8 * s.n_generated, s
    assert s.pauses >= 1
    notes = [ev for ev in events if isinstance(ev, PolicyNote)]
    assert notes and not notes[0].drafting
    assert "drafting paused" in notes[0].reason and "of a target step" in notes[0].reason
    assert policy["draft_cost_ratio"] > 5


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
    assert "drafting paused" in r.stdout and "of a target step" in r.stdout
    data = json.loads(run_cli("compare", "-m", str(cost_pairs["small"]), "-d", str(cost_pairs["big"]),
                              "-p", "The quick", "-n", "100", "--json").stdout)
    spec = data["speculative"]
    assert spec["tokens_drafting_off"] + spec["tokens_drafting_on"] == spec["n_generated"]
    assert spec["policy_notes"] and "paused" in spec["policy_notes"][0]
    assert data["policy"]["drafting"] is False
