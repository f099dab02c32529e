"""The target's layers on llama.cpp RPC workers (`localspec worker`, --rpc), on loopback.

Greedy output over RPC is the local run's, for every drafter, with one worker and with two;
sampling goes the same lossless way; an unreachable worker is one line and exit 2; a worker
killed mid-answer ends that answer with an error (the CLI exits non-zero, the server answers
502 and keeps serving). Without an RPC build of llama-cpp-python these tests skip, except
where the build is required (CI=true or LOCALSPEC_REQUIRE_RPC set): there they fail.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from conftest import GREEDY, run_cli, start_serve

from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig, rpc

pytestmark = pytest.mark.usefixtures("one_llama_thread")

PROMPT = "The quick brown fox"


def _require_rpc() -> None:
    if rpc.supported():
        return
    why = f"llama-cpp-python has no RPC backend; build it with: {rpc.REINSTALL}"
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("LOCALSPEC_REQUIRE_RPC"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def rpc_build():
    _require_rpc()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    """A `localspec worker` subprocess on a free loopback port."""

    def __init__(self, *extra: str):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "localspec", "worker", "--port", str(self.port),
                                      "--threads", "1", *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                rpc.probe(self.endpoint, timeout=2)
                return
            except rpc.WorkerUnreachable:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker did not start: {self.proc.stderr.read()}") from None
                time.sleep(0.1)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        return rc, self.proc.stderr.read()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def workers(rpc_build):
    """Two workers this test process keeps a connection to (a worker serves one client at a
    time, so the tests that start a client process start workers of their own)."""
    ws = [Worker(), Worker()]
    yield ws
    for w in ws:
        rc, err = w.stop()
        assert rc == 0 and "stopped" in err and "Traceback" not in err, err


def engine(target, draft=None, *, rpc_at=(), **kw) -> Engine:
    return Engine(EngineConfig(target=str(target), draft=str(draft) if draft else None, n_ctx=512,
                               rpc=tuple(rpc_at), remember=False, **kw))


def generate(e: Engine, drafter: DrafterKind, sampling=GREEDY, n=48) -> list[int]:
    e.reset()
    spec = RunSpec(drafter=drafter, adaptive=False, draft_max=4, sampling=sampling, max_tokens=n)
    done = list(e.run(e.tokenize(PROMPT), spec))[-1]
    return list(done.token_ids)


@pytest.fixture(scope="module")
def local_outputs(tiny_target, tiny_draft):
    with engine(tiny_target, tiny_draft) as e:
        return {k: generate(e, k) for k in (DrafterKind.NONE, DrafterKind.MODEL, DrafterKind.NGRAM)}


@pytest.mark.parametrize("n_workers", [1, 2])
def test_greedy_over_rpc_is_the_local_output(workers, tiny_target, tiny_draft, local_outputs, n_workers):
    endpoints = [w.endpoint for w in workers[:n_workers]]
    with engine(tiny_target, tiny_draft, rpc_at=endpoints) as e:
        for kind, want in local_outputs.items():
            assert generate(e, kind) == want, kind
        devices = e.describe()["devices"]
        layout = e.memory.backend   # what the learned costs are keyed by: this layout, not "CPU"
    assert layout.startswith("RPC+CPU|") and all(f"{ep}=" in layout for ep in endpoints)
    target = devices["target"]
    assert {d["endpoint"] for d in target.values()} == set(endpoints)   # every worker holds layers
    assert "output" in ",".join(d["layers"] for d in target.values())
    assert devices["draft"] == {"CPU": {"layers": "all", "endpoint": None}}   # the draft stays here
    assert e.describe()["target"]["backend"].startswith("RPC")


def test_tensor_split_and_rpc_draft(workers, tiny_target, tiny_draft, local_outputs):
    a, b = (w.endpoint for w in workers)
    with engine(tiny_target, tiny_draft, rpc_at=(a, b), tensor_split=(1.0, 0.0), rpc_draft=True) as e:
        assert generate(e, DrafterKind.MODEL) == local_outputs[DrafterKind.MODEL]
        devices = e.describe()["devices"]
    assert [d["endpoint"] for d in devices["target"].values()] == [a]   # all layers on the first
    assert {d["endpoint"] for d in devices["draft"].values()} <= {a, b} and devices["draft"]


def test_sampling_over_rpc_is_the_local_sampling(workers, tiny_target, tiny_draft):
    sampling = SamplingConfig(temperature=0.9, seed=7)
    with engine(tiny_target, tiny_draft) as e:
        want = generate(e, DrafterKind.MODEL, sampling)
    with engine(tiny_target, tiny_draft, rpc_at=[workers[0].endpoint]) as e:
        got = generate(e, DrafterKind.MODEL, sampling)
        e.reset()
        done = list(e.run(e.tokenize(PROMPT), RunSpec(drafter=DrafterKind.MODEL, adaptive=False, draft_max=4,
                                                     sampling=sampling, max_tokens=48)))[-1]
    assert got == want
    assert done.summary.drafted > 0 and 0 < done.summary.accepted   # the rejection-sampling path ran


def test_run_json_shows_layers_and_info_lists_devices(workers, tiny_target):
    r = run_cli("run", "-m", str(tiny_target), "--no-draft", "-p", PROMPT, "-n", "8", "--temp", "0",
                "--rpc", workers[0].endpoint, "--json", "--threads", "1")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    (dev,) = out["engine"]["devices"]["target"].values()
    assert dev["endpoint"] == workers[0].endpoint and dev["layers"].endswith("output")
    r = run_cli("info", "--rpc", workers[0].endpoint, "--json")
    assert r.returncode == 0, r.stderr
    (device,) = json.loads(r.stdout)["workers"][workers[0].endpoint]
    assert device["total_bytes"] > 0 and device["free_bytes"] > 0


def test_slots_stepped_together_over_rpc(workers, tiny_target, tiny_draft, local_outputs):
    """The batch runner (a server's --parallel slots) over a worker: each answer is the local one."""
    spec = RunSpec(drafter=DrafterKind.MODEL, adaptive=False, draft_max=4, sampling=GREEDY, max_tokens=48)
    with engine(tiny_target, tiny_draft, rpc_at=[workers[0].endpoint], parallel=2) as e:
        r = e.runner()
        gens = [r.start(e.tokenize(PROMPT), spec) for _ in range(2)]
        r.run_all()
        assert [list(g.result().token_ids) for g in gens] == [local_outputs[DrafterKind.MODEL]] * 2


def test_gpu_layers_keep_the_rest_here(workers, tiny_target, local_outputs):
    with engine(tiny_target, rpc_at=[workers[0].endpoint], gpu_layers=1) as e:
        assert generate(e, DrafterKind.NONE) == local_outputs[DrafterKind.NONE]
        target = e.devices()["target"]
    assert target["CPU"]["endpoint"] is None and target["CPU"]["layers"]   # the first layers here
    (remote,) = [d for d in target.values() if d["endpoint"]]
    assert remote["layers"] == "output"   # -ngl 1: only the output layer on the worker


def test_compare_bench_and_chat_take_rpc(workers, tiny_target, tiny_draft, tmp_path):
    w = workers[0].endpoint
    r = run_cli("compare", "-m", str(tiny_target), "-d", str(tiny_draft), "-p", PROMPT, "-n", "16",
                "--threads", "1", "--rpc", w, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["identical"] is True
    r = run_cli("bench", "-m", str(tiny_target), "-d", str(tiny_draft), "--draft-max", "2", "--runs", "1",
                "-n", "8", "--threads", "1", "--rpc", w, "--out", str(tmp_path / "b.json"))
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "b.json").read_text())
    for command in ("tune", "serve", "chat"):
        assert "--rpc HOST:PORT" in run_cli(command, "--help").stdout

    from localspec.chat.session import ChatSession, ModelChoice

    session = ChatSession(ModelChoice(target=str(tiny_target), draft=str(tiny_draft), n_ctx=256, rpc=(w,)))
    try:
        summary = session.load()
    finally:
        session.close()
    assert w in summary.target.devices and summary.target.backend.startswith("RPC")
    assert summary.draft.devices == ""   # the draft stays here


# -- failures -------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, match", [
    (["--rpc", "nohost"], "give HOST:PORT"),
    (["--rpc", "127.0.0.1:99999"], "give HOST:PORT"),
    (["--rpc-draft"], "--rpc-draft needs workers"),
    (["--tensor-split", "1,1"], "--tensor-split shares"),
    (["--rpc", "127.0.0.1:1", "--tensor-split", "a,b"], "give numbers"),
])
def test_bad_rpc_flags_are_one_line(tiny_target, args, match):
    r = run_cli("run", "-m", str(tiny_target), "--no-draft", "-p", "x", "-n", "2", *args)
    assert r.returncode == 2 and match in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_unreachable_worker_is_one_line_exit_2(rpc_build, tiny_target):
    port = free_port()   # nobody listens there
    r = run_cli("run", "-m", str(tiny_target), "--no-draft", "-p", "x", "-n", "2", "--rpc", f"127.0.0.1:{port}")
    assert r.returncode == 2 and f"RPC worker 127.0.0.1:{port}: connection refused" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    with socket.socket() as silent:   # listens but never answers: the probe gives up
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        with pytest.raises(rpc.WorkerUnreachable, match="no answer within 0.2 s"):
            rpc.probe(f"127.0.0.1:{silent.getsockname()[1]}", timeout=0.2)


def test_build_without_rpc_says_how_to_reinstall(tiny_target, monkeypatch):
    monkeypatch.setattr(rpc, "supported", lambda: False)
    r = run_cli("run", "-m", str(tiny_target), "--no-draft", "-p", "x", "-n", "2", "--rpc", "127.0.0.1:50052")
    assert r.returncode == 2 and rpc.REINSTALL in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_worker_warns_off_loopback_and_refuses_names(rpc_build):
    r = run_cli("worker", "--host", "localhost")
    assert r.returncode == 2 and "give an IPv4 address" in r.stderr
    r = run_cli("worker", "--device", "NOPE0")
    assert r.returncode == 2 and "--device NOPE0: not a device here (this machine has CPU" in r.stderr, r.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        r = run_cli("worker", "--port", str(taken.getsockname()[1]))
    assert r.returncode == 2 and "cannot listen on 127.0.0.1" in r.stderr, r.stderr
    w = Worker("--host", "0.0.0.0")
    rc, err = w.stop()
    assert rc == 0 and "no authentication" in err and "stopped" in err, err


def _start_run(target, draft, endpoint):
    return subprocess.Popen([sys.executable, "-m", "localspec", "run", "-m", str(target), "-d", str(draft),
                             "-p", PROMPT, "-n", "3000", "--ctx", "4096", "--threads", "1", "--temp", "0",
                             "--rpc", endpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_worker_killed_mid_answer_cli_exits_non_zero(rpc_build, slow_pair):
    target, draft = slow_pair
    w = Worker()
    proc = _start_run(target, draft, w.endpoint)
    try:
        assert proc.stdout.read(8), "no text before the worker was killed"
        w.kill()
        _, err = proc.communicate(timeout=60)   # no hang
    finally:
        if proc.poll() is None:
            proc.kill()
    err = err.decode()
    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert f"localspec: error: RPC worker {w.endpoint} stopped answering" in err, err


def _post(url: str, body: dict, timeout: float = 60) -> tuple[int, dict]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_worker_killed_mid_answer_server_502_and_keeps_serving(rpc_build, slow_pair):
    target, draft = slow_pair
    w = Worker()
    proc, base, _ = start_serve("-m", str(target), "-d", str(draft), "--port", "0", "--ctx", "4096",
                             "--threads", "1", "--rpc", w.endpoint)
    try:
        answer: dict = {}
        ask = threading.Thread(target=lambda: answer.update(
            r=_post(base + "/v1/completions", {"prompt": PROMPT, "max_tokens": 3000, "temperature": 0})))
        ask.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:   # until the server says it is generating
            with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
                if re.search(r"^localspec_generating 1", r.read().decode(), re.M):
                    break
            time.sleep(0.05)
        w.kill()
        ask.join(60)
        status, body = answer["r"]
        assert status == 502 and "stopped answering" in body["error"]["message"], body
        status, body = _post(base + "/v1/completions", {"prompt": PROMPT, "max_tokens": 4})   # the next one
        assert status == 502, body
        with urllib.request.urlopen(base + "/health", timeout=10) as r:
            assert r.status == 200
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err


def test_models_panel_shows_which_device_holds_which_layers():
    from localspec.chat.session import ModelCard
    from localspec.tui.widgets.gauges import Lines
    from localspec.tui.widgets.model_panel import ModelsCard

    card = ModelCard(role="target", name="big.gguf", description="llama 1B F16", quant="F16", size_bytes=1 << 30,
                     n_params=10**9, n_layer=24, gpu_layers=24, backend="RPC+CPU", path="/m/big.gguf",
                     devices="RPC0 10.0.0.2:50052 0-11 · RPC1 10.0.0.3:50052 12-23,output")
    out = Lines(60)
    ModelsCard()._model(out, card)
    text = "\n".join("".join(part for part, _ in line) for line in out.lines())
    assert "RPC0 10.0.0.2:50052 0-11" in text and "RPC1 10.0.0.3:50052 12-23,output" in text
    assert "layers on GPU" not in text
