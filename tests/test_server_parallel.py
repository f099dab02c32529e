"""`localspec serve --parallel N`: requests generated together in slots. Concurrent greedy
answers are those answered alone; cancelling one streaming client leaves the others whole and
identical; a full queue still answers 429; a continued conversation finds its slot's cache;
/slots, /props and /metrics show the slots."""

from __future__ import annotations

import contextlib
import threading

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_server import _send, _wait, assert_error, client, request

from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec
from localspec.server import Server, ServerOptions

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "List three colors:"]


@contextlib.contextmanager
def serving(target, draft=None, *, parallel=4, n_ctx=512, drafter="model", **options):
    kind = DrafterKind(drafter)
    engine = Engine(EngineConfig(target=str(target), draft=str(draft) if draft else None, n_ctx=n_ctx, threads=1,
                                 remember=False, read_alongside=False, parallel=parallel))
    try:
        server = Server(engine, RunSpec(drafter=kind), ServerOptions(port=0, model_id="m", log_level="warning",
                                                                      access_log=False, **options))
        with server:
            yield server
    finally:
        engine.close()


@pytest.fixture(scope="module")
def smol(smollm2_f16, smollm2_q4_1):
    with serving(smollm2_f16, smollm2_q4_1, parallel=3) as server:
        yield server


def _ask_all(c, prompts, **kw) -> list[str]:
    out: dict[int, str] = {}

    def ask(i):
        out[i] = c.completions.create(model="m", prompt=prompts[i], temperature=0, **kw).choices[0].text

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return [out[i] for i in range(len(prompts))]


@pytest.mark.parametrize("extra", [{}, {"extra_body": {"speculative.n_max": 4, "speculative.adaptive": False}}],
                         ids=["adaptive", "fixed-k"])
def test_concurrent_answers_are_those_answered_alone(smol, extra):
    c = client(smol)
    alone = [c.completions.create(model="m", prompt=p, temperature=0, max_tokens=40, **extra).choices[0].text
             for p in PROMPTS]
    busiest = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            busiest.append(smol.snapshot().slots_busy)

    w = threading.Thread(target=watch)
    w.start()
    together = _ask_all(c, PROMPTS, max_tokens=40, **extra)
    stop.set()
    w.join()
    assert together == alone
    assert max(busiest) >= 2, "the requests never shared a round"


def test_slots_props_and_metrics(smol):
    status, _, props = request(smol, "GET", "/props")
    assert status == 200 and props["total_slots"] == 3
    assert props["localspec"]["kv_tokens"] == 3 * props["localspec"]["n_ctx_per_slot"]
    status, _, slots = request(smol, "GET", "/slots")
    assert [s["id"] for s in slots] == [0, 1, 2] and not any(s["is_processing"] for s in slots)
    _ask_all(client(smol), PROMPTS[:3], max_tokens=16)
    status, _, text = request(smol, "GET", "/metrics")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert next(iter(families["localspec_slots"].samples)).value == 3
    assert next(iter(families["localspec_slots_busy"].samples)).value == 0
    batch = {s.name: s.value for s in families["localspec_decode_batch_tokens"].samples if not s.labels.get("le")}
    assert batch["localspec_decode_batch_tokens_count"] > 0
    assert batch["localspec_decode_batch_tokens_sum"] > batch["localspec_decode_batch_tokens_count"]   # shared rounds
    tps = [s for s in families["localspec_slot_tokens_per_second"].samples if s.value > 0]
    assert len(tps) >= 2


def test_a_continued_conversation_finds_its_slots_cache(smol):
    c = client(smol)
    messages = [{"role": "user", "content": "Name a fruit."}]
    first = c.chat.completions.create(model="m", messages=messages, temperature=0, max_tokens=12)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "And a vegetable?"}]
    status, _, body = request(smol, "POST", "/v1/chat/completions",
                              {"messages": messages, "temperature": 0, "max_tokens": 8})
    assert status == 200
    assert body["timings"]["cache_n"] >= first.usage.prompt_tokens - 1


def test_cancelling_one_stream_leaves_the_others_whole(slow_pair):
    target, draft = slow_pair
    prompts = [f"{w} the quick brown fox" for w in ("one", "two", "three")]
    with serving(target, draft, parallel=3, n_ctx=2048) as server:
        c = client(server)
        alone = [c.completions.create(model="m", prompt=p, temperature=0, max_tokens=200).choices[0].text
                 for p in prompts[1:]]
        sock = _send(server, "/v1/completions", {"prompt": prompts[0], "max_tokens": 1500, "temperature": 0,
                                                 "stream": True})
        got = b""
        while got.count(b"data: ") < 3:
            got += sock.recv(4096)
        results = {}

        def ask(i):
            results[i] = c.completions.create(model="m", prompt=prompts[i], temperature=0, max_tokens=200)

        threads = [threading.Thread(target=ask, args=(i,)) for i in (1, 2)]
        for t in threads:
            t.start()
        _wait(lambda: server.snapshot().slots_busy == 3, 120)
        sock.close()
        _wait(lambda: server.snapshot().requests.get("cancelled", 0) == 1, 120)
        for t in threads:
            t.join(120)
        assert [results[i].choices[0].text for i in (1, 2)] == alone
        assert [r.outcome for r in server.snapshot().recent[-3:]].count("cancelled") == 1


def test_full_queue_is_still_429(slow_pair):
    target, draft = slow_pair
    with serving(target, draft, parallel=2, n_ctx=4096, queue=1) as server:
        c = client(server)
        done = []

        def ask():
            try:
                done.append(c.completions.create(model="m", prompt="the quick brown fox", temperature=0,
                                                 max_tokens=3000))
            except openai.APIError as exc:
                done.append(exc)

        threads = [threading.Thread(target=ask) for _ in range(3)]
        for busy, t in enumerate(threads[:2], 1):     # one at a time: the queue holds only one
            t.start()
            _wait(lambda busy=busy: server.snapshot().slots_busy == busy, 120)
        threads[2].start()
        _wait(lambda: server.snapshot().queue_depth == 1, 120)
        status, headers, body = request(server, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert_error(status, body, 429, match="queue is full")
        assert int(headers["Retry-After"]) >= 1
        server.scheduler.close()     # cancel them all rather than wait
        for t in threads:
            t.join(60)
        assert server.snapshot().requests.get("queue_full", 0) == 1


def test_id_slot_picks_the_slot_and_a_busy_one_is_waited_for(smol):
    """llama-server's ``id_slot``: the answer comes from the slot asked for, a request for a
    busy slot waits for it while a request for any slot goes on, and a slot that does not
    exist is a 400 naming the range."""
    out: dict[str, dict] = {}

    def ask(name, **body):
        out[name] = request(smol, "POST", "/completion", {"prompt": PROMPTS[1], "n_predict": 24,
                                                          "temperature": 0} | body)[2]

    alone = request(smol, "POST", "/completion", {"prompt": PROMPTS[1], "n_predict": 24, "temperature": 0,
                                                  "id_slot": 2})[2]
    assert alone["id_slot"] == 2
    threads = [threading.Thread(target=ask, args=(n,), kwargs=kw)
               for n, kw in (("a", {"id_slot": 1}), ("b", {"id_slot": 1}), ("any", {}))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert out["a"]["id_slot"] == out["b"]["id_slot"] == 1 and out["any"]["id_slot"] in (0, 2)
    assert out["a"]["content"] == out["b"]["content"] == out["any"]["content"] == alone["content"]
    status, _, body = request(smol, "POST", "/completion", {"prompt": "hi", "id_slot": 3})
    assert_error(status, body, 400, "id_slot", "slots 0 to 2")


def test_a_slot_answers_with_log_probabilities(smol):
    body = {"prompt": PROMPTS[0], "n_predict": 12, "temperature": 0, "n_probs": 1}
    status, _, out = request(smol, "POST", "/completion", body)
    assert status == 200 and len(out["completion_probabilities"]) == out["tokens_predicted"] == 12
    assert [p["id"] for p in out["completion_probabilities"]] == [
        p["top_logprobs"][0]["id"] for p in out["completion_probabilities"]]   # greedy: the best each time
    c = client(smol)
    r = c.completions.create(model="m", prompt=PROMPTS[0], temperature=0, max_tokens=12, logprobs=0)
    assert "".join(r.choices[0].logprobs.tokens) == r.choices[0].text == out["content"]
    assert r.choices[0].logprobs.token_logprobs == pytest.approx(
        [p["logprob"] for p in out["completion_probabilities"]], abs=0.05)


def test_the_headless_runner_starts_a_generation_in_the_slot_asked_for(tiny_target):
    from localspec.engine.batch import SlotsFull
    from localspec.errors import BadInput

    engine = Engine(EngineConfig(target=str(tiny_target), n_ctx=128, threads=1, remember=False, parallel=2))
    try:
        runner, spec = engine.runner(), RunSpec(drafter=DrafterKind.NONE, max_tokens=4)
        prompt = engine.tokenize("hello")
        assert runner.start(prompt, spec, slot=1).slot == 1
        with pytest.raises(SlotsFull, match="slot 1 is busy"):
            runner.start(prompt, spec, slot=1)
        with pytest.raises(BadInput, match="no slot 2: slots are 0 to 1"):
            runner.start(prompt, spec, slot=2)
        assert runner.start(prompt, spec).slot == 0
        runner.run_all()
    finally:
        engine.close()


def test_answers_that_end_with_their_first_token_are_all_answered(smol):
    """Several requests admitted in one round, each done after its first token (its slot frees
    at once and the next takes it): every one is answered."""
    texts = _ask_all(client(smol), PROMPTS[:3] * 2, max_tokens=1)
    assert len(texts) == 6 and all(isinstance(t, str) for t in texts)


def test_a_job_its_slot_refuses_is_answered_and_the_server_left_idle(smol, monkeypatch):
    """A job whose admission fails (no round frees a slot for it) is answered 400 at once,
    and the generating gauge goes back to 0."""
    from localspec.errors import LocalspecError

    def refuse(*args, **kwargs):
        raise LocalspecError("refused at admission")

    monkeypatch.setattr(smol.scheduler.runner, "admit", refuse)
    status, _, body = request(smol, "POST", "/v1/completions", {"model": "m", "prompt": "Hi", "max_tokens": 4})
    assert status == 400 and "refused at admission" in body["error"]["message"]
    status, _, text = request(smol, "GET", "/metrics")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert next(iter(families["localspec_generating"].samples)).value == 0
