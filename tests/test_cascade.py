"""The request-level cascade (opt-in, not lossless): the draft answers alone and is returned,
marked as the draft's, above the threshold; below it the target answers exactly as alone,
drafting from the draft's answer."""

import json

import pytest
from conftest import GREEDY, run_cli
from tiny import TinySpec

from localspec.engine import Engine, EngineConfig, Origin, RunSpec, Token
from localspec.engine.cascade import AnswerLookup
from localspec.engine.spec import SpecError
from localspec.server import translate
from localspec.server.errors import ApiError
from localspec.server.responses import answered_by

pytestmark = pytest.mark.usefixtures("one_llama_thread")


@pytest.fixture(scope="module")
def engine(tiny_target, zoo):
    draft = zoo.get(TinySpec(noise=0.3), "draft-0.3.gguf")
    with Engine(EngineConfig(target=str(tiny_target), draft=str(draft), n_ctx=256, remember=False)) as e:
        yield e


def alone(engine, tokens, model: str):
    """Greedy output of the target alone, or of the draft model alone (a threshold of ~0)."""
    engine.reset()
    if model == "target":
        return list(engine.run(tokens, RunSpec(drafter="none", sampling=GREEDY, max_tokens=40)))[-1]
    return list(engine.run(tokens, RunSpec(sampling=GREEDY, max_tokens=40, cascade=1e-9)))[-1]


def test_below_the_threshold_the_target_answers_as_alone(engine):
    toks = engine.tokenize("The quick brown fox")
    want = alone(engine, toks, "target")
    engine.reset()
    events = list(engine.run(toks, RunSpec(sampling=GREEDY, max_tokens=40, cascade=1.0)))
    done = events[-1]
    assert done.token_ids == want.token_ids
    s = done.summary
    assert s.answered_by == "target" and 0.0 < s.cascade_confidence < 1.0 and s.cascade_seconds > 0
    assert s.generation_seconds >= s.cascade_seconds


def test_above_the_threshold_the_draft_answers_marked(engine):
    toks = engine.tokenize("def fibonacci(n):")
    done = alone(engine, toks, "draft")
    events = list(engine.run(toks, RunSpec(sampling=GREEDY, max_tokens=40, cascade=1e-9)))
    assert events[-1].token_ids == done.token_ids
    s = events[-1].summary
    assert s.answered_by == "draft" and events[-1].policy["answered_by"] == "draft"
    assert all(ev.origin is Origin.DRAFT for ev in events if isinstance(ev, Token))
    target = alone(engine, toks, "target")
    assert target.token_ids != done.token_ids     # the draft's answer is not the target's here


def test_cascade_threshold_is_validated():
    with pytest.raises(SpecError, match="cascade"):
        RunSpec(cascade=0.0).validate()
    with pytest.raises(SpecError, match="cascade"):
        RunSpec(cascade=1.5).validate()


def test_answer_lookup_follows_the_answer():
    a = AnswerLookup([5, 6, 7, 8, 9], n_prompt=2)
    assert a.continuation([], 3) == [5, 6, 7]
    assert a.continuation([5, 6], 2) == [7, 8]
    assert a.continuation([1, 7], 5) == [8, 9]       # parted, then back on the answer's n-gram
    assert a.continuation([1, 2], 4) == []
    assert a.draft([0, 0, 5], 2, None, None).tokens == [6, 7]


def test_cli_labels_the_draft_answer(tiny_target, zoo):
    draft = zoo.get(TinySpec(noise=0.3), "draft-0.3.gguf")
    r = run_cli("run", "-m", str(tiny_target), "-d", str(draft), "-p", "x", "-n", "8", "--temp", "0",
                "--cascade", "0.000001", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "answered by the DRAFT model" in r.stderr
    r = run_cli("run", "-m", str(tiny_target), "-d", str(draft), "-p", "x", "-n", "8", "--temp", "0",
                "--cascade", "--json", "--threads", "1")
    out = json.loads(r.stdout)
    assert out["answered_by"] in ("draft", "target") and 0.0 < out["spec"]["cascade"] <= 1.0   # default or calibrated
    r = run_cli("run", "-m", str(tiny_target), "--ngram", "-p", "x", "--cascade")
    assert r.returncode != 0 and "needs a draft model" in r.stderr


def test_server_request_field_and_response():
    base = RunSpec()
    body = {"messages": [], "localspec": {"cascade": 0.7}}
    assert translate.run_spec(body, base, 4, 128, ("model",)).cascade == 0.7
    assert translate.run_spec({"localspec": {"cascade": None}}, base.with_(cascade=0.5), 4, 128,
                              ("model",)).cascade is None
    for bad, why in (({"cascade": "high"}, "number"), ({"cascade": 2}, r"\(0, 1\]"), ({"x": 1}, "not a localspec"),
                     ("on", "object")):
        with pytest.raises(ApiError, match=why):
            translate.run_spec({"localspec": bad}, base, 4, 128, ("model",))
    with pytest.raises(ApiError, match="no draft model"):
        translate.run_spec({"localspec": {"cascade": 0.5}}, base, 4, 128, ("ngram",))
    from localspec.engine.events import Summary

    assert answered_by(Summary()) == {}
    s = Summary(answered_by="draft", cascade_confidence=0.9)
    assert answered_by(s)["localspec"]["answered_by"] == "draft"


def test_server_marks_the_draft_answer(tiny_target, zoo):
    """Through HTTP: a request's cascade, the response's localspec field (whole and streamed)
    and the metric."""
    from test_server import request, serving

    draft = zoo.get(TinySpec(noise=0.3), "draft-0.3.gguf")
    with serving(tiny_target, draft) as server:
        body = {"prompt": "x", "max_tokens": 8, "temperature": 0, "localspec": {"cascade": 1e-6}}
        status, _, out = request(server, "POST", "/v1/completions", body)
        assert status == 200, out
        assert out["localspec"]["answered_by"] == "draft"
        status, _, out = request(server, "POST", "/v1/completions", body | {"localspec": {"cascade": 1.0}})
        assert out["localspec"]["answered_by"] == "target"
        status, _, out = request(server, "POST", "/v1/completions", body | {"localspec": None})
        assert "localspec" not in out
        status, _, text = request(server, "POST", "/v1/completions", body | {"stream": True})
        assert '"answered_by":"draft"' in text
        status, _, metrics = request(server, "GET", "/metrics")
        assert 'localspec_cascade_answers_total{answered_by="draft"} 2.0' in metrics
        status, _, out = request(server, "POST", "/v1/completions", body | {"localspec": {"cascade": "yes"}})
        assert status == 400 and out["error"]["param"] == "localspec.cascade"
