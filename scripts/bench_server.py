#!/usr/bin/env python3
"""Benchmark: `localspec serve` against `localspec run` on the same prompt. Writes JSON.

1. Speed. The same greedy generation (same pair, prompt, token count, threads) alternately
   through `localspec run --json` (a fresh process each time, as a user runs it) and through
   a running `localspec serve` (streamed, with the official `openai` client). Compared: the
   engine's tok/s as each reports it (run's stats, the server's `timings`), and the tok/s the
   client sees (tokens over the time from the first to the last streamed chunk). Medians.
2. Time to first token through the server: a fresh question each time (no cached prefix
   beyond the chat template's system part), measured at the client, next to the server's own
   figure and `localspec run`'s.
3. Throughput with N concurrent clients (different questions, all sent at once): total tokens
   over the wall time, next to the same requests sent one after another.

    python scripts/bench_server.py --demo -n 256 --runs 9 --threads 1 --out docs/bench/server-smollm2-cpu.json

With ``--parallel N``: slots side by side with llama-server (built from the vendored llama.cpp
by ``scripts/build_reference.sh .cache/reference llama-server``), on one pair (``--pair``: demo,
the generated ``pays``/``loses`` pairs of scripts/bench_policy.py, or ``qwen``: the shipped
Qwen2.5-Coder-0.5B Q4_K_M with its Q2_K as draft, a real 152K-vocabulary model): N concurrent clients'
aggregate tok/s for llama-server ``-np N`` and ``localspec serve --parallel N``, each without
and with the draft; one client (each prompt in turn) against ``localspec serve --parallel 1``;
and whether each concurrent greedy answer is the one the same request gets alone. Settings alternate within
each run (a rotating order); medians over every run. ``--sessions S`` starts fresh server
processes S times (a process keeps the core it landed on, and cores here differ in speed for
minutes at a time).

    python scripts/bench_server.py --parallel 4 --pair demo --clients 4 -n 96 --runs 5 --sessions 3 \
        --threads 1 --ctx 1024
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
TOPICS = ["a dragon", "the ocean", "a robot", "a city at night", "a mountain", "a library", "a storm", "a garden",
          "a train", "the moon", "a violin", "a desert", "a river", "a clock", "a forest", "a ship"]


def pair_args(a) -> list[str]:
    return ["--demo"] if a.demo else ["-m", a.model, "-d", a.draft]


def localspec(*args) -> list[str]:
    return [sys.executable, "-m", "localspec", *args]


def run_once(a) -> dict:
    """`localspec run --json` in its own process."""
    out = subprocess.run(localspec("run", *pair_args(a), "-p", PROMPT, "--chat", "--temp", "0", "-n", str(a.n),
                                   "--json", "--threads", str(a.threads), "--ctx", str(a.ctx)),
                         capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    s = data["stats"]
    return {"tok_s": s["tokens_per_second"], "tokens": s["n_generated"], "ttft_s": s["time_to_first_token"],
            "text": data["text"], "acceptance": s["acceptance_rate"]}


class Served:
    """`localspec serve` in a subprocess on a free port."""

    def __init__(self, a):
        self.proc = subprocess.Popen(localspec("serve", *pair_args(a), "--port", "0", "--quiet", "--threads",
                                               str(a.threads), "--ctx", str(a.ctx), "--queue", "64"),
                                     stderr=subprocess.PIPE, text=True)
        line = ""
        while "serving" not in line:
            line = self.proc.stderr.readline()
            if not line:
                raise SystemExit("the server did not start")
        self.url = re.search(r"(http://\S+)/v1", line).group(1) + "/v1"
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()   # drain
        self.client = openai.OpenAI(base_url=self.url, api_key="none", max_retries=0, timeout=600)
        self.model = self.client.models.list().data[0].id

    def ask(self, question: str, n: int) -> dict:
        t0 = time.perf_counter()
        first = last = None
        text, final = [], None
        for ch in self.client.chat.completions.create(model=self.model, messages=[{"role": "user",
                                                      "content": question}], temperature=0, max_tokens=n,
                                                      stream=True):
            now = time.perf_counter()
            if ch.choices and ch.choices[0].delta.content:
                first = first or now
                last = now
                text.append(ch.choices[0].delta.content)
            if ch.choices and ch.choices[0].finish_reason:
                final = ch
        t = final.model_extra["timings"]
        n_tok = final.usage.completion_tokens
        return {"tok_s": t["predicted_per_second"], "tokens": n_tok,
                "client_tok_s": (n_tok - 1) / (last - first) if last and last > first else 0.0,
                "ttft_s": first - t0, "server_ttft_s": t["time_to_first_token_ms"] / 1000.0,
                "wall_s": time.perf_counter() - t0, "cache_n": t["cache_n"], "prompt_n": t["prompt_n"],
                "text": "".join(text), "acceptance": t["draft_n_accepted"] / t["draft_n"] if t["draft_n"] else 0.0}

    def thread_cpu(self) -> dict[int, float]:
        """CPU seconds of each of the server's threads (Linux /proc)."""
        out = {}
        tick = os.sysconf("SC_CLK_TCK")
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
        return out

    def close(self):
        self.proc.terminate()
        rc = self.proc.wait(60)
        if rc != 0:
            raise SystemExit(f"the server exited with {rc}")


def median(xs):
    return statistics.median(xs) if xs else 0.0


def spread(xs):
    """(max - min) / median: how noisy a series was."""
    return (max(xs) - min(xs)) / statistics.median(xs) if xs and statistics.median(xs) else 0.0


def at_once(call, items: list) -> tuple[list, float]:
    """``call(item)`` for every item, each on its own thread, all started together: the
    results in order and the wall seconds until the last one returned."""
    results = [None] * len(items)

    def one(i):
        results[i] = call(items[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(items))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - t0


def concurrent(server: Served, questions: list[str], n: int) -> dict:
    results, wall = at_once(lambda q: server.ask(q, n), questions)
    tokens = sum(r["tokens"] for r in results)
    return {"wall_s": wall, "tokens": tokens, "tok_s": tokens / wall,
            "engine_tok_s": median([r["tok_s"] for r in results]),
            "ttft_s": sorted(r["ttft_s"] for r in results), "latency_s": sorted(r["wall_s"] for r in results)}


# -- slots side by side with llama-server ---------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
PAR_TOPICS = ["the ocean", "a robot", "a mountain", "a library", "a storm", "a garden", "a train", "the moon"]


def pair_paths(which: str) -> tuple[str, str]:
    if which == "demo":
        from localspec.models.demo import demo_pair

        t, d = demo_pair()
        return str(t), str(d)
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT / "tests"))
    if which == "qwen":   # a real model: the shipped Q4_K_M as target, its Q2_K (llama.cpp's quantizer) as draft
        from bench_sampling import qwen_coder
        from conftest import quantize

        target = qwen_coder()
        draft = target.parent / "qwen-coder-0.5b-q2_k.gguf"
        if not draft.is_file():
            quantize(target, draft, 10)
        return str(target), str(draft)
    from bench_policy import generated_pair

    root = ROOT / ".cache" / "bench_policy"
    root.mkdir(parents=True, exist_ok=True)
    return generated_pair(root, which)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Http:
    """A server process answering /v1/completions on a port of its own."""

    def __init__(self, name: str, cmd: list[str], port: int):
        self.name, self.port = name, port
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while True:
            try:
                if self.get("/health")[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{name} did not start: {' '.join(cmd)}")
            time.sleep(0.2)

    def get(self, path: str):
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()

    def complete(self, prompt: str, n: int) -> dict:
        import http.client

        body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": n, "temperature": 0}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        data = json.loads(conn.getresponse().read())
        wall = time.perf_counter() - t0
        return {"text": data["choices"][0]["text"], "tokens": data["usage"]["completion_tokens"], "wall_s": wall}

    def together(self, prompts: list[str], n: int) -> dict:
        out, wall = at_once(lambda p: self.complete(p, n), prompts)
        tokens = sum(r["tokens"] for r in out)
        return {"tok_s": tokens / wall, "tokens": tokens, "wall_s": wall, "texts": [r["text"] for r in out]}

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def parallel_servers(a, target: str, draft: str) -> dict[str, tuple[list[str], int]]:
    """Each setting's command line and port."""
    servers = {}
    th = ["--threads", str(a.threads)]
    for name, extra in (("localspec", ["--no-draft"]), ("localspec+draft", ["-d", draft])):
        port = free_port()
        servers[name] = (localspec("serve", "-m", target, *extra, "--parallel", str(a.parallel), "--port", str(port),
                                   "--quiet", *th, "--ctx", str(a.ctx), "--queue", "64"), port)
    port = free_port()
    servers["localspec+draft -np 1"] = (localspec("serve", "-m", target, "-d", draft, "--parallel", "1", "--port",
                                                  str(port), "--quiet", *th, "--ctx", str(a.ctx)), port)
    if a.llama_server:
        # Weights repacked into CPU extra buffers as localspec's engine has them: on an AMX CPU
        # neither repacks (llama.cpp's AMX buffer crashes there, see backend.extra_buffers_default).
        from localspec.engine.backend import extra_buffers_default
        repack = [] if extra_buffers_default() else ["--no-repack"]
        for name, extra in (("llama-server", []), ("llama-server+draft", ["-md", draft, "--spec-type", "draft-simple",
                                                                  "-td", str(a.threads), "-tbd", str(a.threads)])):
            port = free_port()
            servers[name] = ([a.llama_server, "-m", target, *extra, *repack, "-np", str(a.parallel), "-c",
                              str(a.ctx * a.parallel), "-t", str(a.threads), "-tb", str(a.threads),
                              "--host", "127.0.0.1", "--port", str(port), "--no-webui"], port)
    return servers


def _parallel_session(a, specs, prompts, together, one, identical, session, parted=None) -> None:
    """One set of fresh servers: a warm-up, each answer alone, then ``a.runs`` rotating runs."""
    servers = {}
    try:
        for name, (cmd, port) in specs.items():
            servers[name] = Http(name, cmd, port)
            servers[name].complete(prompts[0], 8)     # warm-up
        # each request alone on the server with the draft: what concurrent answers are compared with
        alone = {name: [servers[name].complete(p, a.n)["text"] for p in prompts]
                 for name in ("localspec", "localspec+draft")}
        for r in range(a.runs):
            names = list(together)
            names = names[r % len(names):] + names[:r % len(names)]
            for name in names:
                res = servers[name].together(prompts, a.n)
                together[name].append(res["tok_s"])
                if name in identical:
                    identical[name].append(sum(x == y for x, y in zip(res["texts"], alone[name])))
                    if parted is not None:
                        parted.update((name, p, x, y) for p, x, y in zip(prompts, alone[name], res["texts"]) if x != y)
            for name in (list(one) if r % 2 == 0 else list(one)[::-1]):
                # every prompt in turn, one at a time: a single short request is mostly noise
                res = [servers[name].complete(p, a.n) for p in prompts]
                one[name].append(sum(x["tokens"] for x in res) / sum(x["wall_s"] for x in res))
            print(f"session {session + 1}/{a.sessions} run {r + 1}/{a.runs}: "
                  + ", ".join(f"{k} {v[-1]:.1f}" for k, v in together.items())
                  + " tok/s; one client " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in one.items()), file=sys.stderr)
    finally:
        for srv in servers.values():
            srv.close()


def judge_partings(target: str, a, parted: set) -> list[dict]:
    """Each concurrent answer that is not the one its request gets alone: where it parts and
    whether ``localspec compare`` would call it a near-tie (the texts tokenized again)."""
    if not parted:
        return []
    from localspec.chat.comparison import near_tie, where_they_part
    from localspec.engine import Engine, EngineConfig

    out = []
    with Engine(EngineConfig(target=target, n_ctx=a.ctx, threads=a.threads, remember=False)) as e:
        for name, prompt, alone, text in sorted(parted):
            p = e.tokenize(prompt)
            x, y = (e.target_model.tokenize(t, add_special=False, parse_special=False) for t in (alone, text))
            i, gap, rounding = where_they_part(e, p, x, y)
            out.append({"setting": name, "prompt": prompt, "token": i, "gap": gap, "rounding": rounding,
                        "near_tie": near_tie(gap, rounding)})
    return out


def parallel_main(a) -> None:
    target, draft = pair_paths(a.pair)
    prompts = [f"Here is a long paragraph about {PAR_TOPICS[i % len(PAR_TOPICS)]}:\n\n" for i in range(a.clients)]
    load_before = os.getloadavg()
    specs = parallel_servers(a, target, draft)
    together = {name: [] for name in specs if name != "localspec+draft -np 1"}
    one = {"localspec+draft": [], "localspec+draft -np 1": []}
    identical = {name: [] for name in ("localspec", "localspec+draft")}
    parted: set = set()
    for session in range(a.sessions):
        # Fresh processes each session: a long-lived process keeps the core it landed on, and
        # this machine's cores differ in speed for minutes at a time (other tenants).
        _parallel_session(a, specs, prompts, together, one, identical, session, parted)

    med = {k: median(v) for k, v in together.items()}
    ratios = {"localspec_vs_llama_server": med["localspec"] / med["llama-server"] if "llama-server" in med else None,
              "localspec_draft_vs_no_draft": med["localspec+draft"] / med["localspec"],
              "localspec_draft_vs_llama_server_draft": (med["localspec+draft"] / med["llama-server+draft"]
                                                        if "llama-server+draft" in med else None),
              "one_client_parallel_vs_parallel_1": (median(one["localspec+draft"])
                                                    / median(one["localspec+draft -np 1"]))}
    out = {
        "what": f"{a.clients} concurrent clients, llama-server -np {a.parallel} vs localspec serve --parallel "
                f"{a.parallel}, each without and with the draft; one client (the prompts one after another) "
                "vs --parallel 1; alternating, medians",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_before": load_before, "load_average_after": os.getloadavg()},
        "pair": a.pair, "target": target, "draft": draft, "n_tokens": a.n, "threads": a.threads, "ctx": a.ctx,
        "parallel": a.parallel, "clients": a.clients, "runs": a.runs, "sessions": a.sessions,
        "commands": {k: " ".join(v[0]) for k, v in specs.items()},
        "together_tok_s": together, "median_together_tok_s": med,
        "one_client_tok_s": one, "median_one_client_tok_s": {k: median(v) for k, v in one.items()},
        "ratios": ratios,
        "greedy_identical_to_alone": {k: f"{sum(v)}/{len(v) * a.clients}" for k, v in identical.items()},
        "parted": judge_partings(target, a, parted),
    }
    text = json.dumps(out, indent=2)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    print(json.dumps({"median_together_tok_s": med, "ratios": ratios,
                      "identical": out["greedy_identical_to_alone"],
                      "parted": [f"{d['setting']} token {d['token']}: gap {d['gap']}, rounding {d['rounding']}"
                                 + (" (near-tie)" if d["near_tie"] else "") for d in out["parted"]]}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", action="store_true")
    ap.add_argument("-m", "--model")
    ap.add_argument("-d", "--draft")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--concurrent-runs", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--parallel", type=int, help="slots side by side with llama-server (see above)")
    ap.add_argument("--sessions", type=int, default=1,
                    help="with --parallel: sets of fresh server processes, each running --runs runs")
    ap.add_argument("--pair", choices=["demo", "pays", "loses", "qwen"], default="demo")
    ap.add_argument("--llama-server", default=str(ROOT / ".cache" / "reference" / "build" / "bin" / "llama-server"),
                    help="llama-server's binary ('' to leave it out)")
    a = ap.parse_args()
    if a.parallel:
        if a.llama_server and not Path(a.llama_server).is_file():
            ap.error(f"{a.llama_server}: no llama-server (bash scripts/build_reference.sh .cache/reference "
                     "llama-server, or --llama-server '')")
        parallel_main(a)
        return
    if not a.demo and not (a.model and a.draft):
        ap.error("give --demo or -m TARGET -d DRAFT")

    load_before = os.getloadavg()
    server = Served(a)
    try:
        server.ask(PROMPT, 16)          # warm-up (and the same prompt's cache, as a chat client would have)
        run_once(a)
        runs, served = [], []
        cpu_before = server.thread_cpu()
        for i in range(a.runs):          # alternate, starting with each side in turn
            order = (run_once, server.ask) if i % 2 == 0 else (server.ask, run_once)
            for f in order:
                r = f(a) if f is run_once else f(PROMPT, a.n)
                (runs if f is run_once else served).append(r)
            print(f"run {i + 1}/{a.runs}: run {runs[-1]['tok_s']:.1f} tok/s, serve {served[-1]['tok_s']:.1f} "
                  f"(client {served[-1]['client_tok_s']:.1f})", file=sys.stderr)

        cpu_after = server.thread_cpu()
        used = sorted((cpu_after[t] - cpu_before.get(t, 0.0) for t in cpu_after), reverse=True)
        # the busiest thread is the engine's (llama.cpp computes on it with --threads 1); the rest is
        # the HTTP side: the event loop, uvicorn, the SSE chunks
        cpu = {"engine_thread_s": used[0], "other_threads_s": sum(used[1:]),
               "other_share_of_engine": sum(used[1:]) / used[0] if used[0] else 0.0,
               "other_ms_per_token": 1000 * sum(used[1:]) / sum(r["tokens"] for r in served),
               "threads": len(used)}
        ttft = []
        for i in range(a.runs):          # fresh questions: the prompt is decoded, not reused
            ttft.append(server.ask(f"In two sentences, tell me about {TOPICS[i % len(TOPICS)]} "
                                   f"(take {i}).", 8))
        conc, seq = [], []
        questions = [f"Write a paragraph about {TOPICS[i % len(TOPICS)]}." for i in range(a.clients)]
        for i in range(a.concurrent_runs):    # alternate which goes first
            for together in ((True, False) if i % 2 == 0 else (False, True)):
                if together:
                    conc.append(concurrent(server, questions, a.n))
                else:
                    t0 = time.perf_counter()
                    one_by_one = [server.ask(q, a.n) for q in questions]
                    wall = time.perf_counter() - t0
                    toks = sum(r["tokens"] for r in one_by_one)
                    seq.append({"wall_s": wall, "tokens": toks, "tok_s": toks / wall,
                                "engine_tok_s": median([r["tok_s"] for r in one_by_one])})
            print(f"{a.clients} clients: {conc[-1]['tok_s']:.1f} tok/s together, {seq[-1]['tok_s']:.1f} one by one "
                  f"(engine {conc[-1]['engine_tok_s']:.1f} vs {seq[-1]['engine_tok_s']:.1f})", file=sys.stderr)
    finally:
        server.close()

    run_tok = [r["tok_s"] for r in runs]
    srv_tok = [r["tok_s"] for r in served]
    cli_tok = [r["client_tok_s"] for r in served]
    out = {
        "what": "localspec serve vs localspec run: same pair, prompt, greedy, tokens and threads; alternating runs",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_before": load_before, "load_average_after": os.getloadavg()},
        "pair": "demo (SmolLM2-135M F16 target, Q4_1 draft)" if a.demo else {"target": a.model, "draft": a.draft},
        "n_tokens": a.n, "threads": a.threads, "runs": a.runs, "prompt": PROMPT,
        "speed": {
            "run_tok_s": run_tok, "serve_tok_s": srv_tok, "serve_client_tok_s": cli_tok,
            "median_run_tok_s": median(run_tok), "median_serve_tok_s": median(srv_tok),
            "median_serve_client_tok_s": median(cli_tok),
            "ratio_serve_vs_run": median(srv_tok) / median(run_tok),
            "ratio_serve_client_vs_run": median(cli_tok) / median(run_tok),
            "paired_ratios": [s / r for s, r in zip(srv_tok, run_tok)],
            "median_paired_ratio": median([s / r for s, r in zip(srv_tok, run_tok)]),
            "spread_run": spread(run_tok), "spread_serve": spread(srv_tok),
            "same_text_as_run": all(s["text"] == runs[0]["text"] for s in served),
            "acceptance_run": median([r["acceptance"] for r in runs]),
            "acceptance_serve": median([r["acceptance"] for r in served]),
            "server_cpu": cpu,
        },
        "ttft": {
            "client_s": [r["ttft_s"] for r in ttft], "server_s": [r["server_ttft_s"] for r in ttft],
            "prompt_n": [r["prompt_n"] for r in ttft], "cache_n": [r["cache_n"] for r in ttft],
            "median_client_s": median([r["ttft_s"] for r in ttft]),
            "median_server_s": median([r["server_ttft_s"] for r in ttft]),
            "median_run_s": median([r["ttft_s"] for r in runs]),
            "note": "run's figure decodes its whole prompt cold; the server's questions share the chat "
                    "template's system prefix with earlier requests (cache_n)",
        },
        "concurrent": {
            "clients": a.clients, "runs": conc, "one_by_one": seq,
            "median_tok_s": median([c["tok_s"] for c in conc]),
            "median_one_by_one_tok_s": median([s["tok_s"] for s in seq]),
            "ratio": median([c["tok_s"] for c in conc]) / median([s["tok_s"] for s in seq]),
            "paired_ratios": [c["tok_s"] / s["tok_s"] for c, s in zip(conc, seq)],
            "median_engine_tok_s": median([c["engine_tok_s"] for c in conc]),
            "median_one_by_one_engine_tok_s": median([s["engine_tok_s"] for s in seq]),
            "median_last_client_latency_s": median([c["latency_s"][-1] for c in conc]),
            "median_first_client_latency_s": median([c["latency_s"][0] for c in conc]),
        },
    }
    text = json.dumps(out, indent=2)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    sp, tt, cc = out["speed"], out["ttft"], out["concurrent"]
    print(f"serve/run tok/s: {sp['ratio_serve_vs_run']:.3f} (engine), {sp['ratio_serve_client_vs_run']:.3f} "
          f"(client); medians {sp['median_serve_tok_s']:.1f} vs {sp['median_run_tok_s']:.1f}; spread run "
          f"{sp['spread_run']:.0%}, serve {sp['spread_serve']:.0%}; same text: {sp['same_text_as_run']}; "
          f"median of pairs {sp['median_paired_ratio']:.3f}")
    c = sp["server_cpu"]
    print(f"server CPU beside the engine thread: {c['other_share_of_engine']:.1%} of it, "
          f"{c['other_ms_per_token']:.2f} ms per token")
    print(f"TTFT: client {tt['median_client_s'] * 1000:.0f} ms, server {tt['median_server_s'] * 1000:.0f} ms, "
          f"run {tt['median_run_s'] * 1000:.0f} ms")
    print(f"{a.clients} clients: {cc['median_tok_s']:.1f} tok/s together vs {cc['median_one_by_one_tok_s']:.1f} one "
          f"by one ({cc['ratio']:.3f})")


if __name__ == "__main__":
    main()
