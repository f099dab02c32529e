"""`localspec serve` against the official `openai` client (and raw HTTP where a client would
hide what is tested): models, chat and text completions, streamed and whole, the same text as
`localspec run`, usage and timings, API key, bad input, the queue, cancellation, /metrics,
and a clean SIGTERM."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import openai
import pytest
from conftest import run_cli, start_serve
from prometheus_client.parser import text_string_to_metric_families

from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec
from localspec.server import Server, ServerOptions

PROMPT = "The quick brown fox"


@contextlib.contextmanager
def serving(target, draft=None, *, drafter="model", n_ctx=512, model_id="tiny", **options):
    """A server on a free port in this process, in a thread; stopped (and its engine closed) after.
    Its engine starts from nothing learned (what other tests taught the store would decide
    whether the adaptive policy drafts at first), and its draft reads prompts in line: read
    alongside, on a busy machine a tiny 40-token answer could end before the draft had read
    the prompt, so a request for a fixed draft length drafted nothing (reading alongside has
    its own tests)."""
    kind = DrafterKind(drafter)
    engine = Engine(EngineConfig(target=str(target), draft=str(draft) if kind is DrafterKind.MODEL else None,
                                 n_ctx=n_ctx, threads=1, remember=False, read_alongside=False))
    try:
        server = Server(engine, RunSpec(drafter=kind), ServerOptions(port=0, model_id=model_id, log_level="warning",
                                                                      access_log=False, **options))
        with server:
            yield server
    finally:
        engine.close()


def client(server, key="none", **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, **kw)


def request(server, method, path, body=None, headers=None, raw: bytes | None = None):
    """(status, headers, parsed JSON or text) over plain HTTP."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    try:
        return resp.status, resp.headers, json.loads(text)
    except json.JSONDecodeError:
        return resp.status, resp.headers, text


def assert_error(status, body, want_status, param=None, match=""):
    assert status == want_status, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert "Traceback" not in err["message"] and "\n" not in err["message"]
    assert re.search(match, err["message"]), err["message"]
    if param is not None:
        assert err["param"] == param


@pytest.fixture(scope="module")
def tiny(tiny_target, tiny_draft):
    with serving(tiny_target, tiny_draft) as server:
        yield server


@pytest.fixture(scope="module")
def smol(smollm2_f16, smollm2_q4_1):
    with serving(smollm2_f16, smollm2_q4_1, model_id="smollm2", n_ctx=1024) as server:
        yield server


# -- the API with the official client ---------------------------------------------------------

def test_models_list(tiny):
    models = client(tiny).models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert client(tiny).models.retrieve("tiny").id == "tiny"


def test_smollm2_matches_localspec_run(smol, smollm2_f16, smollm2_q4_1):
    """At temperature 0 the server's text is `localspec run`'s, chat and plain, streamed and whole."""
    question = "Name three colours."
    run = run_cli("run", "-m", str(smollm2_f16), "-d", str(smollm2_q4_1), "-p", question, "--chat",
                  "--temp", "0", "-n", "24", "--json", "--threads", "1")
    assert run.returncode == 0, run.stderr
    want_chat = json.loads(run.stdout)["text"]
    run = run_cli("run", "-m", str(smollm2_f16), "-d", str(smollm2_q4_1), "-p", PROMPT,
                  "--temp", "0", "-n", "24", "--json", "--threads", "1")
    want_text = json.loads(run.stdout)["text"]
    assert want_chat and want_text

    c = client(smol)
    msgs = [{"role": "user", "content": question}]
    r = c.chat.completions.create(model="smollm2", messages=msgs, temperature=0, max_tokens=24)
    assert r.choices[0].message.content == want_chat
    assert r.usage.completion_tokens == r.model_extra["timings"]["predicted_n"]
    chunks = list(c.chat.completions.create(model="smollm2", messages=msgs, temperature=0, max_tokens=24,
                                            stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == want_chat
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")

    r = c.completions.create(model="smollm2", prompt=PROMPT, temperature=0, max_tokens=24)
    assert r.choices[0].text == want_text
    chunks = list(c.completions.create(model="smollm2", prompt=PROMPT, temperature=0, max_tokens=24, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == want_text


def test_usage_timings_and_cached_prefix(smol):
    """Every answer carries usage and timings; a continuing conversation reuses its prefix."""
    c = client(smol)
    msgs = [{"role": "user", "content": "Write a short poem about the sea."}]
    first = c.chat.completions.create(model="smollm2", messages=msgs, temperature=0, max_tokens=16)
    t = first.model_extra["timings"]
    for key in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second", "draft_n",
                "draft_n_accepted", "cache_n"):
        assert key in t
    assert t["predicted_n"] == first.usage.completion_tokens > 0
    assert 0 <= t["draft_n_accepted"] <= t["draft_n"]
    assert t["prompt_n"] + t["cache_n"] == first.usage.prompt_tokens

    msgs += [{"role": "assistant", "content": first.choices[0].message.content},
             {"role": "user", "content": "Now one about the mountains."}]
    second = c.chat.completions.create(model="smollm2", messages=msgs, temperature=0, max_tokens=8)
    t2 = second.model_extra["timings"]
    # the whole first exchange (its prompt and most of its answer) is not decoded again
    assert t2["cache_n"] >= first.usage.prompt_tokens
    assert second.usage.prompt_tokens_details.cached_tokens == t2["cache_n"]
    assert t2["prompt_n"] < second.usage.prompt_tokens - first.usage.prompt_tokens + 8

    # the streamed form: the closing chunk, and the include_usage chunk
    chunks = list(c.chat.completions.create(model="smollm2", messages=msgs[:1], temperature=0, max_tokens=4,
                                            stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    assert chunks[-2].choices[0].finish_reason == "length" and "timings" in chunks[-2].model_extra


def test_speculation_controls_per_request(tiny):
    """speculative.enabled / drafter / draft_max change how, never what, at temperature 0."""
    c = client(tiny)

    def ask(spec):
        r = c.completions.create(model="tiny", prompt=PROMPT, temperature=0, max_tokens=40,
                                 extra_body={"speculative": spec} if spec is not None else None)
        return r.choices[0].text, r.model_extra["timings"]

    text, t = ask(None)
    # The default drafts with the model; whether its probes land in 40 tokens is the policy's
    # call (the tiny draft is as large as the target: it starts paused), so only the fixed
    # draft length below must draft.
    assert t["drafter"] == "model"
    off_text, off = ask({"enabled": False})
    assert off["draft_n"] == 0 and off["drafter"] == "none"
    ngram_text, ng = ask({"drafter": "ngram"})
    assert ng["drafter"] == "ngram"
    fixed_text, fixed = ask({"draft_max": 2, "p_min": 0.0, "draft_temperature": 0.5})
    assert fixed["draft_n"] > 0
    assert text == off_text == ngram_text == fixed_text


def test_sampling_options_and_stop(tiny):
    c = client(tiny)
    # A seed makes sampling repeatable for a fixed draft length (the adaptive policy picks K
    # from measured timings, and each draft length draws the random numbers differently).
    kw = dict(model="tiny", prompt=PROMPT, max_tokens=30, temperature=0.9, top_p=0.9,
              extra_body={"top_k": 20, "min_p": 0.01, "speculative": {"draft_max": 3}})
    a = c.completions.create(seed=7, **kw).choices[0].text
    b = c.completions.create(seed=7, **kw).choices[0].text
    assert a == b
    full = c.completions.create(model="tiny", prompt=PROMPT, max_tokens=30, temperature=0).choices[0].text
    stop = full[5:8]
    r = c.completions.create(model="tiny", prompt=PROMPT, max_tokens=30, temperature=0, stop=[stop, "zzz"])
    assert r.choices[0].finish_reason == "stop" and stop not in r.choices[0].text
    assert full.startswith(r.choices[0].text)
    r = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], temperature=0,
                                  max_completion_tokens=5)
    assert r.usage.completion_tokens <= 5


# -- refusals ---------------------------------------------------------------------------------

def test_api_key(tiny_target):
    with serving(tiny_target, drafter="none", api_key="s3cret") as server:
        with pytest.raises(openai.AuthenticationError):
            client(server).models.list()
        with pytest.raises(openai.AuthenticationError):
            client(server, key="wrong").completions.create(model="tiny", prompt="hi", max_tokens=2)
        assert client(server, key="s3cret").completions.create(model="tiny", prompt="hi", max_tokens=2).choices
        status, headers, body = request(server, "GET", "/metrics")
        assert_error(status, body, 401, match="API key")
        assert request(server, "GET", "/health")[0] == 200
        status, _, text = request(server, "GET", "/metrics", headers={"Authorization": "Bearer s3cret"})
        assert status == 200 and 'localspec_requests_total{endpoint="completions",outcome="unauthorized"} 1.0' in text


@pytest.mark.parametrize("body,status,param,match", [
    ({"prompt": "hi", "n": 2}, 400, "n", "n must be 1"),
    ({"prompt": "hi", "top_p": 2}, 400, "top_p", r"top_p must be in \(0, 1\]"),
    ({"prompt": "hi", "temperature": "hot"}, 400, "temperature", "temperature must be"),
    ({"prompt": "hi", "max_tokens": 0}, 400, "max_tokens", "max_tokens must be at least 1"),
    ({"prompt": "hi", "max_completion_tokens": -3}, 400, "max_completion_tokens", "max_completion_tokens"),
    ({"prompt": "hi", "stop": ["ok", 3]}, 400, "stop", "stop must be strings"),
    ({"prompt": "hi", "seed": -1}, 400, "seed", "seed"),
    ({"prompt": "hi", "speculative": {"draft_max": 0}}, 400, "speculative.draft_max", "speculative.draft_max"),
    ({"prompt": "hi", "speculative": {"p_min": 1.5}}, 400, "speculative.p_min", r"speculative.p_min must be"),
    ({"prompt": "hi", "speculative": {"drafter": "magic"}}, 400, "speculative.drafter", "must be one of"),
    ({"prompt": "hi", "speculative": {"turbo": True}}, 400, "speculative.turbo", "not a speculation setting"),
    ({"prompt": "hi", "speculative": {"enabled": "yes"}}, 400, "speculative.enabled", "true or false"),
    ({"prompt": "hi", "logprobs": 30}, 400, "logprobs", "from 0 to 20"),
    ({"prompt": ["a", "b"]}, 400, "prompt", "one prompt"),
    ({"prompt": 5}, 400, "prompt", "string or a list of token ids"),
    ({"prompt": [1, 10**9]}, 400, "prompt", "token ids must be in"),
    ({"prompt": "the quick brown fox " * 200}, 400, "prompt", r"the prompt is \d+ tokens but the context holds 512"),
])
def test_bad_completion_requests(tiny, body, status, param, match):
    s, _, out = request(tiny, "POST", "/v1/completions", body)
    assert_error(s, out, status, param, match)


def test_bad_requests_of_other_kinds(tiny):
    assert_error(*request(tiny, "POST", "/v1/completions", raw=b"{not json")[::2], 400, match="not valid JSON")
    assert_error(*request(tiny, "POST", "/v1/completions", raw=b"[1, 2]")[::2], 400, match="JSON object")
    assert_error(*request(tiny, "POST", "/v1/chat/completions", {"messages": []})[::2], 400, "messages")
    assert_error(*request(tiny, "POST", "/v1/chat/completions",
                          {"messages": [{"content": "no role"}]})[::2], 400, "messages[0].role")
    assert_error(*request(tiny, "POST", "/v1/chat/completions", {"messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})[::2],
        400, "messages[0].content", "only text")
    with socket.create_connection(("127.0.0.1", tiny.port)) as sock:   # declared too big: refused unread
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     b"Content-Length: 9999999\r\n\r\n{")
        head, _, rest = sock.makefile("rb").read().partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413") and b"the limit is" in rest
    assert_error(*request(tiny, "GET", "/v1/nothing")[::2], 404, match="Not Found")
    assert_error(*request(tiny, "GET", "/v1/chat/completions")[::2], 405)
    with pytest.raises(openai.BadRequestError, match="context holds 512"):
        client(tiny).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "fox " * 600}],
                                             stream=True)


# -- the queue, cancellation, metrics ---------------------------------------------------------

def _wait(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_concurrent_clients_answered_in_order(slow_pair):
    """Six clients at once: each gets its own whole answer, in arrival order, nothing lost."""
    target, draft = slow_pair
    prompts = [f"{w} the quick brown fox" for w in ("one", "two", "three", "four", "five", "six")]
    with serving(target, draft, n_ctx=1024) as server:
        c = client(server)
        want = [c.completions.create(model="tiny", prompt=p, temperature=0, max_tokens=120).choices[0].text
                for p in prompts]
        results: dict[int, tuple] = {}

        def ask(i):
            r = c.completions.create(model="tiny", prompt=prompts[i], temperature=0, max_tokens=120,
                                     stream=i % 2 == 1)
            if i % 2:
                chunks = list(r)
                text, rid = "".join(ch.choices[0].text for ch in chunks if ch.choices), chunks[0].id
            else:
                text, rid = r.choices[0].text, r.id
            results[i] = (text, rid, time.perf_counter())

        threads = []
        depth = 0
        for i in range(len(prompts)):
            base = server.scheduler.submitted
            threads.append(threading.Thread(target=ask, args=(i,)))
            threads[-1].start()
            _wait(lambda base=base: server.scheduler.submitted > base)   # arrived before the next one starts
            depth = max(depth, server.snapshot().queue_depth)
        for t in threads:
            t.join(60)
        assert depth >= 2, "the requests never queued up: the test did not test the queue"
        assert [results[i][0] for i in range(len(prompts))] == want
        ids = [results[i][1] for i in range(len(prompts))]
        assert ids == sorted(ids)                                       # ids count arrivals
        finished = [results[i][2] for i in range(len(prompts))]
        assert finished == sorted(finished)                             # served first come, first served
        snap = server.snapshot()
        assert snap.requests.get("length", 0) + snap.requests.get("stop", 0) == 2 * len(prompts)
        assert snap.queue_depth == 0 and snap.current is None


def test_full_queue_is_429_with_retry_after(slow_pair):
    target, draft = slow_pair
    with serving(target, draft, n_ctx=4096, queue=1) as server:
        c = client(server)
        errors, done = [], []

        def ask():
            try:
                done.append(c.completions.create(model="tiny", prompt=PROMPT, temperature=0, max_tokens=2000))
            except openai.RateLimitError as exc:
                errors.append(exc)

        first = threading.Thread(target=ask)
        first.start()
        _wait(lambda: server.snapshot().current is not None)
        second = threading.Thread(target=ask)
        second.start()
        _wait(lambda: server.snapshot().queue_depth == 1)
        status, headers, body = request(server, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert_error(status, body, 429, match="queue is full")
        assert int(headers["Retry-After"]) >= 1
        for _ in range(2):   # then cancel both, rather than wait for them
            _wait(lambda: server.snapshot().current is not None)
            job = server.scheduler.current
            server.scheduler.cancel(job)
            _wait(lambda job=job: server.scheduler.current is not job)
        first.join(60)
        second.join(60)
        assert len(done) == 2 and not errors


def _send(server, path, body) -> socket.socket:
    """Send a request over a raw socket (the test decides when to hang up)."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    data = json.dumps(body).encode()
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def test_disconnect_cancels_generation(slow_pair):
    """A client that goes away stops its generation: streamed, whole, or still waiting in the queue."""
    target, draft = slow_pair
    with serving(target, draft, n_ctx=4096) as server:
        snap = server.snapshot
        at_cancel = []
        cancel = server.scheduler.cancel

        def recording_cancel(job, reason="cancelled"):   # the tokens made when the app cancels
            cur = snap().current
            at_cancel.append(cur.tokens if cur is not None else 0)
            cancel(job, reason)

        server.scheduler.cancel = recording_cancel
        one_round = RunSpec().draft_max + 1
        # streamed: read some events, hang up
        sock = _send(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 3000, "temperature": 0,
                                                 "stream": True})
        got = b""
        while got.count(b"data: ") < 5:
            got += sock.recv(4096)
        sock.close()
        _wait(lambda: snap().requests.get("cancelled", 0) == 1, timeout=10)
        cancelled = snap().recent[-1]
        assert cancelled.outcome == "cancelled" and 0 < cancelled.tokens < 3000
        # the round in flight ends, no other starts (the snapshot may lag one round)
        assert cancelled.tokens - at_cancel[-1] <= 2 * one_round

        # whole (non-streaming): hang up while it generates
        sock = _send(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 3000, "temperature": 0})
        _wait(lambda: snap().current is not None and snap().current.tokens > 0)
        sock.close()
        _wait(lambda: snap().requests.get("cancelled", 0) == 2, timeout=10)
        assert 0 < snap().recent[-1].tokens < 3000
        assert snap().recent[-1].tokens - at_cancel[-1] <= 2 * one_round

        # one generating, one waiting: the waiting one leaves the queue when its client goes
        c = client(server)
        busy = threading.Thread(target=lambda: c.completions.create(model="tiny", prompt=PROMPT, max_tokens=300,
                                                                    temperature=0))
        busy.start()
        _wait(lambda: snap().current is not None)
        sock = _send(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 5})
        _wait(lambda: snap().queue_depth == 1)
        sock.close()
        _wait(lambda: snap().requests.get("cancelled", 0) == 3, timeout=10)
        assert snap().queue_depth == 0 and snap().current is not None   # the first one goes on
        busy.join(60)
        assert snap().requests.get("length", 0) == 1


def test_metrics_parse_and_add_up(tiny_target, tiny_draft):
    with serving(tiny_target, tiny_draft) as server:
        c = client(server)
        made = 0
        for stream in (False, True):
            # A fixed draft length: the counters need drafts, and the tiny draft is as large as
            # the target, so the adaptive policy would start paused.
            r = c.completions.create(model="tiny", prompt=PROMPT, temperature=0, max_tokens=20, stream=stream,
                                     stream_options={"include_usage": True} if stream else None,
                                     extra_body={"speculative": {"draft_max": 4}})
            made += list(r)[-1].usage.completion_tokens if stream else r.usage.completion_tokens
        request(server, "POST", "/v1/completions", raw=b"nope")
        status, headers, text = request(server, "GET", "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        samples = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        value = lambda name, **labels: samples[(name, tuple(sorted(labels.items())))]
        assert value("localspec_tokens_generated_total") == made
        assert value("localspec_requests_total", endpoint="completions", outcome="length") == 2
        assert value("localspec_requests_total", endpoint="completions", outcome="bad_request") == 1
        drafted = value("localspec_draft_tokens_total")
        assert 0 < value("localspec_draft_tokens_accepted_total") <= drafted
        assert value("localspec_draft_position_tokens_total", position="1") > 0
        assert 0 <= value("localspec_draft_acceptance", position="1") <= 1
        assert (value("localspec_tokens_drafting_total", drafting="on")
                + value("localspec_tokens_drafting_total", drafting="off")) == made
        assert value("localspec_queue_depth") == 0
        assert value("localspec_time_to_first_token_seconds_count") == 2
        assert value("localspec_time_per_output_token_seconds_count") == made


# -- the command: errors and signals ------------------------------------------------------------

def test_serve_command_errors(tiny_target):
    r = run_cli("serve")
    assert r.returncode == 2 and "no target model" in r.stderr and "Traceback" not in r.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_cli("serve", "-m", str(tiny_target), "--no-draft", "--port", str(port))
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_answers_in_flight_and_exits_0(slow_pair, sig):
    target, draft = slow_pair
    proc, url, _ = start_serve("-m", str(target), "-d", str(draft), "--port", "0", "--ctx", "4096",
                            "--threads", "1", "--parallel", "1")
    try:
        server = SimpleNamespace(port=int(url.rsplit(":", 1)[1]))   # for request()
        c = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        outcome = {}
        streaming = threading.Event()

        def streamed():
            try:
                for _ in c.completions.create(model="bigram-big", prompt=PROMPT, max_tokens=3000, stream=True):
                    streaming.set()
                outcome["stream"] = "ended"
            except openai.APIError as exc:
                outcome["stream"] = str(exc)
            finally:
                streaming.set()

        def waiting():
            try:
                c.completions.create(model="bigram-big", prompt=PROMPT, max_tokens=5)
                outcome["queued"] = "answered"
            except openai.APIStatusError as exc:
                outcome["queued"] = exc.status_code

        # The signal comes once the stream has sent text and the second request waits behind it
        # (seen, not slept on: a connection the server has not yet taken would be refused instead).
        threads = [threading.Thread(target=streamed)]
        threads[0].start()
        assert streaming.wait(60) and "stream" not in outcome, outcome
        threads.append(threading.Thread(target=waiting))
        threads[1].start()
        _wait(lambda: request(server, "GET", "/health")[2]["queue_depth"] == 1)
        proc.send_signal(sig)
        rc = proc.wait(30)
        for t in threads:
            t.join(10)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, err
    assert "shutting down" in outcome["stream"]
    assert outcome["queued"] == 503
    assert "Traceback" not in err and "server stopped" in err


# -- the app's server screen ----------------------------------------------------------------------

def test_server_screen_follows_the_server(slow_pair):
    """`serve --tui`'s screen shows the queue, the request being generated and the totals."""
    import asyncio

    from localspec.tui.screens.server import ServerApp

    target, draft = slow_pair
    with serving(target, draft, n_ctx=4096) as server:
        c = client(server)
        c.completions.create(model="tiny", prompt=PROMPT, temperature=0, max_tokens=10)
        threads = [threading.Thread(target=c.completions.create, kwargs=dict(
            model="tiny", prompt=PROMPT, temperature=0, max_tokens=n)) for n in (1500, 5)]

        async def watch():
            app = ServerApp(server.snapshot)
            async with app.run_test(size=(100, 30)) as pilot:
                screen = app.screen
                text = lambda wid: str(screen.query_one(wid).render())
                assert "no request" in text("#server-current")
                assert "requests 1: length 1" in text("#server-totals")
                threads[0].start()
                await asyncio.to_thread(_wait, lambda: (cur := server.snapshot().current) is not None
                                        and cur.tokens > 0)
                threads[1].start()
                await asyncio.to_thread(_wait, lambda: server.snapshot().queue_depth == 1)
                await pilot.pause(0.4)
                assert "1/16 waiting · generating" in text("#server-queue")
                assert "tok/s" in text("#server-current") and "acceptance" in text("#server-current")
                assert screen.query_one("#server-current").has_class("active")
                assert app.screen.query_one("#server-recent").row_count == 1
                server.scheduler.cancel(server.scheduler.current)
                await asyncio.to_thread(_wait, lambda: server.snapshot().served == 3)
                await pilot.pause(0.4)
                assert "cancelled 1" in text("#server-totals") and "length 2" in text("#server-totals")
                assert app.screen.query_one("#server-recent").row_count == 3

        asyncio.run(watch())
        for t in threads:
            t.join(30)


def test_server_package_is_ui_free():
    """The app reads the server's snapshot; localspec.server never imports textual or the app."""
    code = ("import sys, localspec.server, localspec.server.live, localspec.cli.serve; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich') "
            "or m.startswith('localspec.tui')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
