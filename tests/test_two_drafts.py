"""Two draft models: greedy output is the target's alone, each draft's tokens are counted
apart, both drafts are checked, loaded and described, and the pair's policy routes rounds
to the faster draft (in the simulator's terms, see also test_simulate_two_drafts)."""

import json

import pytest
from conftest import GREEDY, alone_and_with, run_cli
from tiny import TinySpec, answer_stretch_swaps

from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec

pytestmark = pytest.mark.usefixtures("one_llama_thread")
PROMPTS = ["The quick brown fox", "def fibonacci(n):", "x"]


@pytest.fixture(scope="session")
def trio(zoo, cost_pairs):
    """(target, small draft, large draft) of one bigram: the small draft (100x cheaper than
    the target) is wrong on every other 24 tokens of the answer to PROMPTS[0], the large one
    (about 10x cheaper) nearly always right."""
    target = cost_pairs["big"]
    with Engine(EngineConfig(target=str(target), n_ctx=256, remember=False)) as e:
        tokens = e.tokenize(PROMPTS[0])
        answer = list(e.run(tokens, RunSpec(drafter=DrafterKind.NONE, sampling=GREEDY, max_tokens=150)))[-1]
    swaps = answer_stretch_swaps(tokens[-1:] + list(answer.token_ids), 24)
    small = zoo.get(TinySpec(n_embd=64, n_layer=1, bigram_seed=5, layer_gain=0.05, bigram_swaps=swaps),
                    "bigram-small-stretches.gguf")
    large = zoo.get(TinySpec(n_embd=256, n_ff=512, n_layer=2, bigram_seed=5, layer_gain=0.05), "bigram-medium.gguf")
    return target, small, large


def engine_for(trio, **kw) -> Engine:
    target, small, large = trio
    # the larger file first: the engine orders them by size
    return Engine(EngineConfig(target=str(target), draft=str(large), draft2=str(small), n_ctx=512,
                               rollback_depth=9, remember=False, **kw))


@pytest.mark.parametrize("adaptive", [True, False])
def test_two_drafts_greedy_identical_to_target(trio, adaptive):
    with engine_for(trio) as e:
        assert DrafterKind.MODELS in e.drafters
        assert e.describe()["small_draft"] == "draft2"
        assert e.describe()["draft2"]["path"].endswith("bigram-small-stretches.gguf")
        for prompt in PROMPTS:
            toks = e.tokenize(prompt)
            base = RunSpec(drafter=DrafterKind.NONE, sampling=GREEDY, max_tokens=60)
            e.reset()
            want = list(e.run(toks, base))[-1]
            e.reset()
            spec = RunSpec(drafter=DrafterKind.MODELS, sampling=GREEDY, max_tokens=60, adaptive=adaptive,
                           draft_max=6)
            got = list(e.run(toks, spec))[-1]
            assert got.token_ids == want.token_ids, prompt
            s = got.summary
            assert s.drafted > 0 and s.accepted > 0
            assert sum(d["drafted"] for d in s.by_drafter.values()) == s.drafted
            assert sum(d["accepted"] for d in s.by_drafter.values()) == s.accepted
            assert set(s.by_drafter) <= {"small", "large"}


def test_two_drafts_hand_over_where_the_small_one_fails(trio):
    """The small draft starts; where it fails the large one takes over, and its tokens are
    accepted (the answer to PROMPTS[0] has stretches the small draft gets wrong)."""
    with engine_for(trio) as e:
        done = list(e.run(e.tokenize(PROMPTS[0]), RunSpec(drafter=DrafterKind.MODELS, sampling=GREEDY,
                                                          max_tokens=200)))[-1]
    by = done.summary.by_drafter
    assert done.policy["pair"] is True and done.policy["switches"] >= 1 and done.policy["scores"] >= 1
    assert by["small"]["drafted"] > 0 and by["large"]["accepted"] > 0.8 * by["large"]["drafted"], by


def test_a_draft_scores_the_text_it_missed(trio):
    """Catching up with predictions: the target scored on its own greedy answer predicts
    every token of it (the prompt is no text to predict); scoring again covers only what
    came since; the large draft, right nearly everywhere, predicts nearly every token."""
    from localspec.engine.backend import Context
    from localspec.engine.drafters import ModelDrafter

    with engine_for(trio) as e:
        toks = e.tokenize(PROMPTS[0])
        answer = list(list(e.run(toks, RunSpec(drafter=DrafterKind.NONE, sampling=GREEDY,
                                               max_tokens=50)))[-1].token_ids)
        text = toks + answer
        for model, least in ((e.target_model, 1.0), (e.draft_ctx.model, 0.9)):
            d = ModelDrafter(Context(model, n_ctx=128))
            try:
                hits, seconds = d.score(text[:len(toks) + 30], start=len(toks))
                assert len(hits) == 30 and sum(hits) >= least * 30 and seconds > 0, hits
                more, _ = d.score(text, start=len(toks))
                assert len(more) == 20 and sum(more) >= least * 20, more
                assert d.score(text, start=len(toks))[0] == ()      # nothing missed since
            finally:
                d.close()


def test_cli_two_drafts_json(trio):
    target, small, large = trio
    r = run_cli("run", "-m", str(target), "-d", str(small), "-d", str(large), "-p", "def f(x):", "-n", "24",
                "--temp", "0", "--json", "--threads", "1")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["spec"]["drafter"] == "models"
    assert out["engine"]["draft2"]["path"].endswith("bigram-medium.gguf")
    assert set(out["stats"]["by_drafter"]) <= {"small", "large"}


def test_cli_three_drafts_refused(trio):
    target, small, large = trio
    r = run_cli("run", "-m", str(target), "-d", str(small), "-d", str(large), "-d", str(small), "-p", "x")
    assert r.returncode != 0
    assert "at most two draft models" in r.stderr and "Traceback" not in r.stderr


def test_second_draft_incompatible_is_refused(trio, zoo):
    from localspec.errors import IncompatiblePair

    target, small, _ = trio
    other = zoo.get(TinySpec(vocab_shuffle=7), "other-vocab.gguf")
    with pytest.raises(IncompatiblePair):
        Engine(EngineConfig(target=str(target), draft=str(small), draft2=str(other), n_ctx=128))


def test_check_verifies_every_draft(trio, zoo):
    target, small, large = trio
    r = run_cli("check", str(target), "-d", str(small), "-d", str(large), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["compatible"] is True and [d["path"] for d in out["drafts"]] == [str(small), str(large)]
    other = zoo.get(TinySpec(vocab_shuffle=7), "other-vocab.gguf")
    r = run_cli("check", str(target), str(small), str(other))
    assert r.returncode == 1 and "draft 2 of 2" in r.stdout


def test_bench_two_drafts(trio):
    target, small, large = trio
    r = run_cli("bench", "-m", str(target), "-d", str(small), "-d", str(large), "--runs", "1", "-n", "16",
                "--policy", "adaptive", "--draft-max", "4", "--json", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "models" in r.stdout
    r = run_cli("bench", "-m", str(target), "-d", str(small), "--drafter", "models", "--runs", "1")
    assert r.returncode != 0 and "two draft models" in r.stderr


def test_two_drafts_sampling_is_seeded_and_carries_each_drafts_distribution(trio):
    """Sampling with two drafts runs the same rejection sampling (each round's draft carries
    the distributions of the model that drafted it): a seeded run repeats itself."""
    from localspec.engine import SamplingConfig

    spec = RunSpec(drafter=DrafterKind.MODELS, sampling=SamplingConfig(temperature=0.8, seed=7), max_tokens=60,
                   adaptive=False, draft_max=4)
    with engine_for(trio) as e:
        toks = e.tokenize(PROMPTS[0])
        runs = []
        for _ in range(2):
            e.reset()
            runs.append(list(e.run(toks, spec))[-1])
    assert runs[0].token_ids == runs[1].token_ids
    assert runs[0].summary.drafted > 0 and runs[0].summary.n_generated == 60


def test_a_layered_draft_is_the_large_drafts_own(trio):
    """The large draft checking the small one's blocks gives exactly its own greedy draft,
    block by block (the small draft is wrong on stretches of this answer: blocks are cut and
    the large draft's cache gives back what it checked and dropped), and the small draft's
    cache, which held the proposals, drafts as a fresh one would afterwards."""
    from localspec.engine.backend import Context
    from localspec.engine.drafters import GREEDY as DRAFT_GREEDY
    from localspec.engine.drafters import ModelDrafter

    with engine_for(trio) as e:
        toks = e.tokenize(PROMPTS[0])
        text = toks + list(list(e.run(toks, RunSpec(drafter=DrafterKind.NONE, sampling=GREEDY,
                                                    max_tokens=120)))[-1].token_ids)
        small_model, large_model = e.draft2_ctx.model, e.draft_ctx.model
        parts = [ModelDrafter(Context(m, n_ctx=256)) for m in (small_model, large_model, large_model, small_model)]
        small, large, alone, fresh = parts
        try:
            cut = dropped = 0
            for block in (1, 2, 3):
                for end in range(len(toks), len(text), 7):
                    context = text[:end]
                    d = large.draft_checked(small, context, 6, block)
                    assert d.tokens == alone.draft(context, 6, DRAFT_GREEDY, None).tokens, (block, end)
                    assert d.dists is None and d.steps == len(d.helper_blocks) + 1
                    cut += sum(a < n for n, a in d.helper_blocks)
                    dropped += sum(n - a for n, a in d.helper_blocks)
                    assert small.draft(context, 4, DRAFT_GREEDY, None).tokens == \
                        fresh.draft(context, 4, DRAFT_GREEDY, None).tokens
            assert cut > 5 and dropped > 5, (cut, dropped)
        finally:
            for p in parts:
                p.close()


@pytest.mark.usefixtures("always_layered")
def test_layered_rounds_give_the_targets_output(trio):
    """Every round layered (the policy started in that mode, as an answer after one that
    ended layered does): greedy output identical to the target alone, and the tokens counted
    per role (the large draft's for the target, the small one's for the large)."""
    from localspec.engine.policy import LAYERED

    with engine_for(trio) as e:
        for prompt in PROMPTS:
            want, got = alone_and_with(e, e.tokenize(prompt), DrafterKind.MODELS, 80)
            assert got.token_ids == want.token_ids, prompt
            by = got.summary.by_drafter
            assert set(by) == {"layered", "small_for_large"}, by
            assert by["layered"]["drafted"] == got.summary.drafted > 0
            assert by["layered"]["accepted"] == got.summary.accepted > 0
            assert 0 < by["small_for_large"]["accepted"] <= by["small_for_large"]["drafted"]
            assert got.policy["in_use"] == LAYERED and got.policy["layered"] is True


@pytest.mark.slow
@pytest.mark.usefixtures("always_layered")
def test_layered_sampling_is_lossless(zoo):
    """Every round layered under sampling: the layered draft is one-hot (the large draft's
    greedy tokens, see test_a_layered_draft_is_the_large_drafts_own), and rejection sampling
    keeps the target's distribution (the first two tokens' joint frequencies over 2000 seeds
    against the target's exact probabilities)."""
    from test_sampling import ALPHA, chi_square_p, exact_two_tokens, sample_pairs

    from localspec.engine import SamplingConfig

    target = zoo.get(TinySpec(scale=0.35), "flat-target.gguf")
    small = zoo.get(TinySpec(scale=0.35, noise=0.2, n_embd=64, n_layer=1), "flat-small.gguf")
    large = zoo.get(TinySpec(scale=0.35, noise=0.05), "flat-large.gguf")
    cfg = SamplingConfig(temperature=1.0, top_k=8)
    with Engine(EngineConfig(target=str(target), draft=str(large), draft2=str(small), n_ctx=256,
                             rollback_depth=4, remember=False)) as e:
        e.test_spec = RunSpec(drafter=DrafterKind.MODELS, draft_max=3)
        prompt = e.tokenize("Once upon a time")
        expected = exact_two_tokens(target, prompt, cfg)
        counts, drafted, accepted = sample_pairs(e, prompt, cfg, 2000)
    assert 0 < accepted < drafted
    assert chi_square_p(counts, expected, 2000) > ALPHA


def test_bench_layered_script(trio, tmp_path):
    """scripts/bench_layered.py times the large draft's greedy draft alone and from the small
    one's blocks, and checks both give the same tokens (JSON out)."""
    import subprocess
    import sys
    from pathlib import Path

    _, small, large = trio
    out = tmp_path / "layered.json"
    script = Path(__file__).resolve().parent.parent / "scripts" / "bench_layered.py"
    r = subprocess.run([sys.executable, str(script), "--large", str(large), "--small", str(small), "--runs", "1",
                        "-k", "4", "--blocks", "1,2", "-n", "40", "--threads", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert [(c["k"], c["block"]) for c in data["cells"]] == [(4, 1), (4, 2)]
    assert all(c["identical"] and c["alone_ms_per_token"] > 0 and c["checked_ms_per_token"] > 0 for c in data["cells"])


def test_bench_two_drafts_script(tmp_path):
    """scripts/bench_two_drafts.py writes the trio (its small draft wrong on every other
    stretch of the target's own answer), runs every setting and reports JSON; the outputs
    are the target's alone."""
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "trio.json"
    script = Path(__file__).resolve().parent.parent / "scripts" / "bench_two_drafts.py"
    r = subprocess.run([sys.executable, str(script), "--runs", "1", "-n", "64", "--stretch", "16", "--variants",
                        "mixed", "--models", str(tmp_path / "models"), "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (res,) = json.loads(out.read_text())["results"]
    assert res["variant"] == "mixed" and res["identical_to_target"]
    assert set(res["median_tps"]) == {"target", "small", "large", "both"} and res["both_over_better_single"] > 0
