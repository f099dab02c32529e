"""MTP drafting (``--draft mtp``): the target's own nextn head drafts through an MTP context.

Tiny qwen35 models with an MTP block (embedded, or split into a trunk GGUF and a sibling
``mtp-*.gguf`` with the same weights) show: greedy output identical to the target alone,
lossless sampling, the same drafts from an embedded and a separate head, the adaptive
policy treating the head like any drafter, clear one-line errors, and the front ends (run,
compare, bench, tune, check, the chat core) taking ``--draft mtp``. The cross-check against
llama.cpp's own ``llama-speculative-simple --spec-type draft-mtp`` is in
:mod:`test_mtp_reference`.
"""

import json
import math
import shutil

import pytest
from conftest import run_cli
from test_hybrid import kv_exact
from test_sampling import ALPHA, chi_square_p, exact_two_tokens
from tiny import REAL_VOCAB, qwen35_spec, split_paths

from localspec.chat.session import ChatSession, ModelChoice
from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig, Step
from localspec.engine.backend import Rollback
from localspec.engine.events import Done
from localspec.engine.policy import FixedPolicy
from localspec.errors import BadInput
from localspec.models.mtp_head import locate_mtp, parse_draft_arg

GREEDY = SamplingConfig(temperature=0.0)
PROMPTS = ["The quick brown fox", "def fibonacci(n):", "Once upon a time there was"]
# A target that mostly follows a fixed bigram chain, and an MTP head that mostly predicts it
# (mtp_noise makes it wrong often enough for partial acceptance).
MTP_TARGET = qwen35_spec(mtp=True, bigram_seed=5, layer_gain=0.05, mtp_noise=2.0)


pytestmark = pytest.mark.usefixtures("one_llama_thread")


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """The same model as MTP_TARGET, as a trunk GGUF and a sibling mtp-*.gguf."""
    root = tmp_path_factory.mktemp("mtp-split")
    return split_paths(root, MTP_TARGET, "tiny-q35")


@pytest.fixture(scope="module")
def models(zoo):
    return {
        "mtp": zoo.get(MTP_TARGET, "q35-mtp.gguf"),
        "plain": zoo.get(qwen35_spec(), "q35-plain.gguf"),
        "narrow-mtp": zoo.get(qwen35_spec(mtp=True, n_embd=32, n_head=2, n_head_kv=1, n_ff=64), "narrow-mtp.gguf"),
    }


def mtp_engine(target, mtp_file=None, *, n_ctx=512, draft_max=4, **kw) -> Engine:
    return Engine(EngineConfig(target=str(target), mtp=True, mtp_file=str(mtp_file) if mtp_file else None,
                               n_ctx=n_ctx, rollback_depth=draft_max + 1, **kw))


def generate(engine, tokens, *, drafter="mtp", sampling=GREEDY, n=40, adaptive=False, draft_max=4, seed=None):
    if seed is not None:
        sampling = SamplingConfig(**(sampling.to_dict() | {"seed": seed}))
    spec = RunSpec.of(drafter=drafter, adaptive=adaptive, draft_max=draft_max, max_tokens=n, sampling=sampling)
    events = list(engine.run(tokens, spec))
    done = events[-1]
    assert isinstance(done, Done)
    return done, [e for e in events if isinstance(e, Step)]


def greedy_check(engine, prompt, n=40, **kw):
    toks = engine.tokenize(prompt)
    engine.reset()
    base, _ = generate(engine, toks, drafter="none", n=n)
    engine.reset()
    spec, steps = generate(engine, toks, n=n, **kw)
    assert spec.token_ids == base.token_ids, prompt
    assert kv_exact(engine.target_ctx)
    return spec, steps


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_identical_embedded_head(models, k):
    with mtp_engine(models["mtp"], draft_max=k) as e:
        assert e.drafters == (DrafterKind.NGRAM, DrafterKind.MTP, DrafterKind.NONE)
        assert e.target_ctx.rollback is Rollback.RS
        for prompt in PROMPTS:
            spec, steps = greedy_check(e, prompt, draft_max=k)
            s = spec.summary
            assert s.drafted > 0 and 0 < s.accepted, prompt
            assert s.target_memory == "rs" and s.restarts == 0
            assert max(st.drafted for st in steps) <= k
        # The head followed every position the target holds (and the last verify batch's
        # rejected drafts, dropped before its next draft, as llama.cpp does).
        assert e.mtp_ctx.tokens[:e.target_ctx.n_past] == e.target_ctx.tokens


def test_greedy_with_penalties_is_the_target_alone(models):
    """The head proposes from its rows penalized as the target judges them."""
    with mtp_engine(models["mtp"]) as e:
        toks = e.tokenize(PROMPTS[0])
        plain, _ = generate(e, toks, drafter="none")
        cfg = SamplingConfig(temperature=0.0, repeat_penalty=1.5, presence_penalty=0.2,
                             logit_bias=((plain.token_ids[3], -math.inf),))
        e.reset()
        base, _ = generate(e, toks, drafter="none", sampling=cfg)
        e.reset()
        spec, _ = generate(e, toks, sampling=cfg)
    assert spec.token_ids == base.token_ids != plain.token_ids
    assert spec.summary.drafted > 0 and spec.summary.accepted > 0


def test_partial_acceptance_and_one_decode_per_draft_token(models):
    with mtp_engine(models["mtp"]) as e:
        spec, steps = greedy_check(e, PROMPTS[0], n=60)
        s = spec.summary
        assert 0 < s.accepted < s.drafted, "both acceptance and rejection happen"
        drafting = [st for st in steps if st.drafted]
        # one MTP decode per drafted token: the catch-up rides with the first
        assert all(st.draft_steps == st.drafted for st in drafting)
        # after the prompt, the catch-up is what the last round accepted, plus the new token
        assert all(1 <= st.sync_tokens <= 4 + 1 for st in drafting[1:])


def test_separate_head_file_drafts_like_the_embedded_one(models, split):
    trunk, head = split
    toks = None
    runs = {}
    for name, (target, mtp_file) in {"embedded": (models["mtp"], None), "file": (trunk, head)}.items():
        with mtp_engine(target, mtp_file) as e:
            toks = toks or e.tokenize(PROMPTS[2])
            done, steps = generate(e, toks, n=50)
            runs[name] = (done.token_ids, [(st.drafted, st.accepted) for st in steps])
            assert e.describe()["mtp"]["embedded"] is (mtp_file is None)
    assert runs["embedded"] == runs["file"]
    # a sibling mtp-*.gguf is found on its own
    assert locate_mtp(str(trunk)).file == str(head)
    assert locate_mtp(str(models["mtp"])).embedded


class PausesAWhile(FixedPolicy):
    """K=3, except rounds ``start``..``stop`` (observed rounds, counted from 0): paused."""

    def __init__(self, start: int, stop: int):
        super().__init__(3)
        self.may_draft, self.start, self.stop, self.rounds = True, start, stop, 0

    def next_k(self) -> int:
        return 0 if self.start <= self.rounds < self.stop else 3

    def observe(self, step):
        self.rounds += 1
        self.drafting = not (self.start <= self.rounds < self.stop)


def test_a_paused_head_reads_no_decode_and_catches_up_at_its_next_draft(models, monkeypatch):
    """While drafting pauses the head stops reading the target's decodes (a head decode a
    token: 0.83x the target alone on an H200); its next draft makes the missed entries in one
    batch, and the answer stays the target's."""
    import localspec.engine.engine as engine_module
    import localspec.engine.mtp as mtp_module

    decoded = []
    real = mtp_module.MtpContext.decode

    def counting(self, tokens, pos0, hidden, **kw):
        decoded.append((pos0, len(tokens)))
        return real(self, tokens, pos0, hidden, **kw)

    monkeypatch.setattr(mtp_module.MtpContext, "decode", counting)
    with mtp_engine(models["mtp"]) as e:
        toks = e.tokenize(PROMPTS[1])
        base, _ = generate(e, toks, drafter="none", n=60)
        monkeypatch.setattr(engine_module, "policy_for", lambda *a, **kw: PausesAWhile(3, 30))
        e.reset()
        decoded.clear()
        done, steps = generate(e, toks, n=60)
        assert done.token_ids == base.token_ids
        paused = [st for st in steps[1:] if st.k == 0]
        assert len(paused) == 27
        lo = len(toks) + sum(st.emitted for st in steps[:4])          # the first position the pause emitted
        hi = lo + sum(st.emitted for st in paused)
        # no head decode while paused; after it, one batch from the last position the head
        # had not read (the one before the pause's first) up to the next draft's last token
        assert not [(p, n) for p, n in decoded if lo <= p < hi - 1], (lo, hi, decoded)
        assert (lo - 1, hi - lo) in decoded, (lo, hi, decoded)


def test_adaptive_policy_treats_mtp_like_any_drafter(models):
    with mtp_engine(models["mtp"], draft_max=8) as e:
        spec, steps = greedy_check(e, PROMPTS[1], n=80, adaptive=True, draft_max=8)
        assert spec.policy.get("adaptive")
        assert spec.summary.drafter == "mtp"
        assert any(st.drafted for st in steps)


@pytest.mark.slow
def test_lossless_sampling_with_mtp(zoo):
    t = zoo.get(qwen35_spec(mtp=True, scale=0.35, mtp_noise=0.3), "q35-mtp-flat.gguf")
    cfg = SamplingConfig(temperature=1.0, top_k=8)
    from collections import Counter

    n = 2000
    with mtp_engine(t, draft_max=3) as e:
        prompt = e.tokenize("Once upon a time")
        expected = exact_two_tokens(t, prompt, cfg)
        counts, drafted, accepted = Counter(), 0, 0
        for seed in range(n):
            done, _ = generate(e, prompt, sampling=cfg, n=3, draft_max=3, seed=seed)
            counts[tuple(done.token_ids[:2])] += 1
            drafted += done.summary.drafted
            accepted += done.summary.accepted
    assert 0 < accepted < drafted, "both acceptance and rejection must occur"
    pval = chi_square_p(counts, expected, n)
    assert pval > ALPHA, f"MTP-speculative samples do not follow the target (p = {pval:.2e})"


def test_real_vocabulary_with_mtp(zoo):
    t = zoo.get(qwen35_spec(mtp=True, n_vocab=REAL_VOCAB, n_embd=32, n_head=2, n_head_kv=1, n_ff=64, d_state=8,
                          f16=True, bigram_seed=5, layer_gain=0.05, mtp_noise=1.0), "q35-mtp-big.gguf")
    with mtp_engine(t, threads=1) as e:
        assert e.target_model.n_vocab == REAL_VOCAB
        spec, _ = greedy_check(e, PROMPTS[0], n=24)
        assert spec.summary.accepted > 0


def test_clear_errors(models, split, tmp_path):
    with pytest.raises(BadInput, match="carries no MTP"):
        mtp_engine(models["plain"])
    with pytest.raises(BadInput, match="carries no MTP"):
        mtp_engine(split[0], models["plain"])
    with pytest.raises(BadInput, match="n_embd"):
        mtp_engine(models["mtp"], models["narrow-mtp"])
    lone = tmp_path / "lone.gguf"
    shutil.copy(models["plain"], lone)
    with pytest.raises(BadInput, match="no MTP head"):
        locate_mtp(str(lone))
    with mtp_engine(models["mtp"]) as e, pytest.raises(BadInput, match="no draft model"):
        generate(e, e.tokenize("hi"), drafter="model")
    assert parse_draft_arg("mtp") == (True, None) and parse_draft_arg("MTP:/x/y.gguf") == (True, "/x/y.gguf")
    assert parse_draft_arg("draft.gguf") == (False, None)


# -- front ends -------------------------------------------------------------------------


def test_run_and_compare_with_draft_mtp(models, split):
    r = run_cli("run", "-m", str(models["mtp"]), "--draft", "mtp", "-p", "The quick", "-n", "24", "--temp", "0",
                "--fixed-k", "--draft-max", "4", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["spec"]["drafter"] == "mtp" and data["engine"]["mtp"]["embedded"] is True
    assert data["stats"]["drafted"] > 0 and data["stats"]["accepted"] > 0
    r = run_cli("run", "-m", str(split[0]), "--draft", "mtp", "-p", "The quick", "-n", "24", "--temp", "0", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["engine"]["mtp"]["path"] == str(split[1])
    r = run_cli("run", "-m", str(split[0]), "--draft", f"mtp:{split[1]}", "-p", "The quick", "-n", "8", "--json")
    assert r.returncode == 0, r.stderr
    r = run_cli("compare", "-m", str(models["mtp"]), "-d", "mtp", "-p", "Once upon a time", "-n", "30", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["text_target_only"] == out["text_speculative"]


def test_cli_errors_are_one_line(models, tmp_path):
    lone = tmp_path / "lone.gguf"
    shutil.copy(models["plain"], lone)
    for args in (["run", "-m", str(lone), "--draft", "mtp", "-p", "hi"],
                 ["run", "-m", str(models["mtp"]), "--draft", "mtp:", "-p", "hi"],
                 ["run", "-m", str(models["mtp"]), "--draft", "mtp:/no/such.gguf", "-p", "hi"],
                 ["run", "--demo", "--draft", "mtp", "-p", "hi"],
                 ["bench", "--demo", "--drafter", "mtp"]):
        r = run_cli(*args)
        assert r.returncode != 0, args
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_check_reports_mtp_layers(models, split, tmp_path):
    r = run_cli("check", str(models["mtp"]))
    assert r.returncode == 0 and "embedded MTP head (1 nextn layer)" in r.stdout
    r = run_cli("check", str(split[0]), "--json")
    data = json.loads(r.stdout)
    assert r.returncode == 0 and data["mtp"] and data["mtp_file"] == str(split[1]) and not data["embedded"]
    lone = tmp_path / "lone.gguf"
    shutil.copy(models["plain"], lone)
    r = run_cli("check", str(lone), "mtp")
    assert r.returncode == 1 and "not available" in r.stdout
    r = run_cli("check", str(models["mtp"]), str(models["plain"]), "--json")
    assert any("MTP head" in n for n in json.loads(r.stdout)["notes"])


def test_bench_and_tune_with_mtp(models, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path / "home"))
    out = tmp_path / "b.json"
    r = run_cli("bench", "-m", str(models["mtp"]), "-d", "mtp", "--draft-max", "2", "--policy", "fixed",
                "--runs", "1", "-n", "16", "--threads", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    cells = json.loads(out.read_text())["cells"]
    assert [c["setting"]["drafter"] for c in cells] == ["mtp"]
    r = run_cli("tune", "-m", str(models["mtp"]), "-d", "mtp", "-n", "12", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "stored for this pair" in r.stdout
    r = run_cli("tune", "--show")
    assert "MTP head (embedded)" in r.stdout
    r = run_cli("run", "-m", str(models["mtp"]), "--draft", "mtp", "-p", "hi", "-n", "4")
    assert "using tuned settings" in r.stderr


def test_chat_core_loads_the_mtp_head(models):
    choice = ModelChoice(target=str(models["mtp"]), n_ctx=256)
    session = ChatSession(choice, RunSpec(drafter=DrafterKind.MTP, max_tokens=8))
    assert session.has_mtp()
    summary = session.load()
    try:
        assert summary.drafter == "mtp" and summary.mtp == "embedded in the target" and summary.draft is None
        assert DrafterKind.MTP in session.engine.drafters
        assert not session.needs_reload(RunSpec(drafter=DrafterKind.MTP))
    finally:
        session.close()
    plain = ChatSession(ModelChoice(target=str(models["plain"])), RunSpec(drafter=DrafterKind.NGRAM))
    assert not plain.has_mtp()
    with pytest.raises(BadInput):
        plain.check_settings(RunSpec(drafter=DrafterKind.MTP))


# -- pull --------------------------------------------------------------------------------

Q_REPO = "ggml-org/Qwen3.8-27B-GGUF"   # the catalog's qwen-27b: its MTP head ships apart


@pytest.fixture
def fake_hub(split, models, monkeypatch, tmp_path):
    from hubserver import FakeHub, configure_client

    from localspec.models import hub as lhub

    trunk, head = split
    with FakeHub() as h:
        h.add_file(Q_REPO, "Qwen3.8-27B-Q4_K_M.gguf", trunk)
        h.add_file(Q_REPO, "mtp-Qwen3.8-27B-Q8_0.gguf", head)
        h.add_file(Q_REPO, "mtp-Qwen3.8-27B-Q4_0.gguf", head)
        h.add_file("acme/Embedded-GGUF", "embedded-q4_k_m.gguf", models["mtp"])
        h.add_file("acme/Plain-GGUF", "plain-q4_k_m.gguf", models["plain"])
        configure_client(monkeypatch, h, tmp_path)
        monkeypatch.setenv("LOCALSPEC_HOME", str(tmp_path / "home"))
        monkeypatch.setattr(lhub, "_retry_pause", lambda attempt: None)
        yield h


def test_pull_fetches_the_separate_mtp_head(fake_hub, monkeypatch):
    from hubserver import set_offline

    from localspec.models.store import Store

    r = run_cli("pull", "qwen-27b", "--draft", "mtp", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert [f["path"] for f in plan["files"]] == ["Qwen3.8-27B-Q4_K_M.gguf", "mtp-Qwen3.8-27B-Q8_0.gguf"]
    assert plan["draft"] is None and plan["mtp"] == {"embedded": False, "file": "mtp-Qwen3.8-27B-Q8_0.gguf"}
    assert any("ships its MTP head apart" in n for n in plan["notes"])
    assert plan["header_bytes"] < sum(f["size"] for f in plan["files"]) and not Store().models()
    r = run_cli("pull", "qwen-27b", "--draft", "mtp", "--draft-quant", "Q4_0", "--dry-run", "--json")
    assert json.loads(r.stdout)["mtp"]["file"] == "mtp-Qwen3.8-27B-Q4_0.gguf"
    # the real pull: the target is registered, the head lies next to it
    r = run_cli("pull", "qwen-27b", "--draft", "mtp")
    assert r.returncode == 0, r.stderr
    assert "--draft mtp" in r.stderr
    assert [m.name for m in Store().models()] == ["qwen-27b:q4_k_m"]
    r = run_cli("run", "-m", "qwen-27b", "--draft", "mtp", "-p", "The quick", "-n", "12", "--temp", "0", "--json")
    assert r.returncode == 0, r.stderr
    mtp = json.loads(r.stdout)["engine"]["mtp"]
    assert mtp["embedded"] is False and mtp["path"].endswith("mtp-Qwen3.8-27B-Q8_0.gguf")
    # offline, a second pull completes from the cache alone and says the same
    set_offline(monkeypatch, True)
    fake_hub.clear_log()
    r = run_cli("pull", "qwen-27b", "--draft", "mtp", "--json")
    assert r.returncode == 0, r.stderr
    assert fake_hub.log == [] and json.loads(r.stdout)["mtp"]["file"] == "mtp-Qwen3.8-27B-Q8_0.gguf"


def test_pull_notes_an_embedded_head_and_refuses_a_missing_one(fake_hub, monkeypatch):
    r = run_cli("pull", "acme/Embedded-GGUF:Q4_K_M", "--draft", "mtp", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["mtp"] == {"embedded": True, "file": None} and len(plan["files"]) == 1
    assert any("embedded in embedded-q4_k_m.gguf" in n for n in plan["notes"])
    r = run_cli("pull", "acme/Plain-GGUF:Q4_K_M", "--draft", "mtp", "--dry-run")
    assert r.returncode != 0 and "no MTP head" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("pull", "qwen-27b", "--draft", "mtp:x.gguf", "--dry-run")
    assert r.returncode != 0 and "takes no path" in r.stderr
    # offline with nothing cached: the catalog's word first, then why nothing can be fetched
    from hubserver import set_offline

    set_offline(monkeypatch, True)
    r = run_cli("pull", "qwen-27b", "--draft", "mtp")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("note: qwen-27b ships its MTP head apart (mtp-Qwen3.8-27B-Q4_0.gguf")
    assert "HF_HUB_OFFLINE" in lines[-1] and "Traceback" not in r.stderr
