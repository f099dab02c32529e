#!/usr/bin/env python3
"""The target's layers on an RPC worker behind a slow link: does speculation save round trips?

A `localspec worker` runs here; between it and the client a TCP proxy (a process of its own)
holds every chunk for DELAY ms each way. On the generated pair where drafting pays (the
cost pair of tests/conftest.py: the draft ~100x cheaper, both agree on every token), four
settings alternate, prompt by prompt: the target alone and speculative (the default adaptive
policy), each with the target here and with the target on the worker; the draft is always
here. Reported: tok/s medians, speculative / target-alone locally and over RPC, per delay.

    python scripts/bench_rpc.py --delays 0.5 2 5 --runs 5 -n 128 --out docs/bench/rpc-cpu.json

``--proxy LISTEN UPSTREAM CONTROL`` is the proxy itself (started by the script).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LOCALSPEC_HOME", str(ROOT / ".cache" / "bench_rpc" / "home"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


# -- the proxy (its own process) ----------------------------------------------------------------

def _pipe(src: socket.socket, dst: socket.socket, delay: list[float]) -> None:
    """Forward src -> dst, each chunk sent ``delay[0]`` seconds after it arrived (order kept)."""
    import queue

    q: queue.SimpleQueue = queue.SimpleQueue()

    def writer():
        while True:
            due, data = q.get()
            if data is None:
                break
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(data)
            except OSError:
                break
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    threading.Thread(target=writer, daemon=True).start()
    while True:
        try:
            data = src.recv(1 << 20)
        except OSError:
            data = b""
        if not data:
            q.put((0.0, None))
            return
        q.put((time.perf_counter() + delay[0], data))


def proxy(listen: int, upstream: int, control: str) -> None:
    """Listen on 127.0.0.1:listen, forward to 127.0.0.1:upstream; the delay (ms, each way) is
    read from the file ``control`` whenever it changes."""
    delay = [0.0]

    def follow():
        last = None
        while True:
            try:
                text = Path(control).read_text().strip()
            except OSError:
                text = ""
            if text and text != last:
                delay[0] = float(text) / 1000.0
                last = text
            time.sleep(0.02)

    threading.Thread(target=follow, daemon=True).start()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen))
    srv.listen(4)
    while True:
        client, _ = srv.accept()
        server = socket.create_connection(("127.0.0.1", upstream))
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_pipe, args=(client, server, delay), daemon=True).start()
        threading.Thread(target=_pipe, args=(server, client, delay), daemon=True).start()


# -- the benchmark ------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(endpoint: str, proc: subprocess.Popen) -> None:
    from localspec.engine import rpc

    deadline = time.monotonic() + 60
    while True:
        try:
            rpc.probe(endpoint, timeout=2)
            return
        except rpc.WorkerUnreachable:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{endpoint} did not start") from None
            time.sleep(0.1)


def one(engine, tokens, spec) -> dict:
    engine.reset()
    done = list(engine.run(tokens, spec))[-1]
    s = done.summary
    return {"tok_s": s.tokens_per_second, "tokens": list(done.token_ids), "drafted": s.drafted,
            "accepted": s.accepted}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--proxy", nargs=3, metavar=("LISTEN", "UPSTREAM", "CONTROL"), help=argparse.SUPPRESS)
    ap.add_argument("--delays", nargs="+", type=float, default=[0.5, 2.0, 5.0], help="ms each way")
    ap.add_argument("--runs", type=int, default=5, help="rounds over the prompts per delay")
    ap.add_argument("-n", type=int, default=128, help="tokens per answer")
    ap.add_argument("--prompts", type=int, default=3, help="how many of the built-in prompts")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads, client and worker")
    ap.add_argument("--out", default="docs/bench/rpc-cpu.json")
    args = ap.parse_args(argv)
    if args.proxy:
        proxy(int(args.proxy[0]), int(args.proxy[1]), args.proxy[2])
        return 0

    from bench_policy import generated_pair

    from localspec.bench.sweep import PROMPTS
    from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig, rpc

    rpc.require()
    work = ROOT / ".cache" / "bench_rpc"
    work.mkdir(parents=True, exist_ok=True)
    models = ROOT / ".cache" / "bench_policy"   # the pair bench_policy.py makes, made once
    models.mkdir(parents=True, exist_ok=True)
    target, draft = generated_pair(models, "pays")
    w_port, p_port = free_port(), free_port()
    control = work / "delay"
    control.write_text("0")
    worker = subprocess.Popen([sys.executable, "-m", "localspec", "worker", "--port", str(w_port),
                               "--threads", str(args.threads)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prox = subprocess.Popen([sys.executable, __file__, "--proxy", str(p_port), str(w_port), str(control)])
    try:
        wait_for(f"127.0.0.1:{w_port}", worker)
        time.sleep(0.5)
        endpoint = f"127.0.0.1:{p_port}"
        greedy = SamplingConfig(temperature=0.0, seed=0)
        specs = {"target": RunSpec(drafter=DrafterKind.NONE, sampling=greedy, max_tokens=args.n),
                 "speculative": RunSpec(drafter=DrafterKind.MODEL, sampling=greedy, max_tokens=args.n)}
        cfg = dict(target=target, draft=draft, n_ctx=1024, threads=args.threads, remember=False)
        local = Engine(EngineConfig(**cfg))
        remote = Engine(EngineConfig(**cfg, rpc=(endpoint,)))
        engines = {"local": local, "rpc": remote}
        prompts = [local.tokenize(p["prompt"]) for p in PROMPTS[:args.prompts]]
        results = []
        identical = True
        for delay in args.delays:
            control.write_text(str(delay))
            time.sleep(0.1)
            for e in engines.values():   # warm: the policy's costs at this delay, caches
                for spec in specs.values():
                    one(e, prompts[0], spec)
            rows: dict[str, list[float]] = {f"{w}/{s}": [] for w in engines for s in specs}
            for r in range(args.runs):
                for p in prompts:
                    order = [(w, s) for w in engines for s in specs]
                    if r % 2:
                        order.reverse()
                    outs = {}
                    for w, s in order:
                        res = one(engines[w], p, specs[s])
                        rows[f"{w}/{s}"].append(res["tok_s"])
                        outs[(w, s)] = res["tokens"]
                    identical &= len({tuple(t) for t in outs.values()}) == 1
            med = {k: statistics.median(v) for k, v in rows.items()}
            entry = {"delay_ms_each_way": delay, "median_tok_s": med, "samples": rows,
                     "ratio_local": med["local/speculative"] / med["local/target"],
                     "ratio_rpc": med["rpc/speculative"] / med["rpc/target"]}
            results.append(entry)
            print(f"delay {delay:g} ms: local {med['local/target']:.1f} -> {med['local/speculative']:.1f} tok/s "
                  f"({entry['ratio_local']:.2f}x); rpc {med['rpc/target']:.1f} -> {med['rpc/speculative']:.1f} "
                  f"tok/s ({entry['ratio_rpc']:.2f}x)", file=sys.stderr, flush=True)
        out = {"command": "python scripts/bench_rpc.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "pair": {"target": Path(target).name, "draft": Path(draft).name},
               "tokens": args.n, "runs": args.runs, "prompts": args.prompts, "threads": args.threads,
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
               "greedy_outputs_identical": identical, "results": results}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
        local.close()
        remote.close()
    finally:
        for p in (prox, worker):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
