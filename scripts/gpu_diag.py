#!/usr/bin/env python3
"""Why speculation did or did not pay on this machine: for each generated pair of
scripts/gpu_check.sh (a 152K-vocabulary model pair and a qwen35 target with an MTP head),
target alone, the default policy and fixed K runs, with the policy's own estimates at the
end of each answer (draft/target cost ratio, verify cost by batch, loop time, state, why).

    python scripts/gpu_diag.py [--tokens 256] [--runs 2] > diag.json
    python scripts/gpu_diag.py --load-probe > load.json   # which tiny test models load offloaded
    python scripts/gpu_diag.py --first-decodes > first.json   # what a batch size's first decode costs

``--load-probe`` loads each of a few tiny test models (tests/tiny) in a process of its own,
every layer offloaded, and reports its exit status, llama.cpp's last log lines and, for a
crash, Python's fault handler's stack: the engine tests' models crashed under CUDA in
``llama_model_load_from_file`` while the larger generated pairs loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts"), str(ROOT)]

from bench_overhead import python_ms_per_token, run  # noqa: E402
from tiny import TinySpec, TinyZoo, bpe_vocab, qwen35_spec, write_model  # noqa: E402

from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig, Step  # noqa: E402

KEEP = ("state", "k", "reason", "draft_cost_ratio", "target_step_seconds", "draft_step_seconds",
        "verify_seconds_by_batch", "round_seconds_beyond_decodes", "acceptance", "pauses", "probes")


def cells(engine: Engine, prompt: list[int], drafter: DrafterKind, n: int, runs: int) -> dict:
    """Target alone, the default and fixed K=1,2,4,8 with ``drafter``, alternating runs."""
    greedy = SamplingConfig(temperature=0.0)
    settings = {"target": RunSpec(drafter=DrafterKind.NONE, sampling=greedy, max_tokens=n),
                "default": RunSpec(drafter=drafter, sampling=greedy, max_tokens=n)}
    for k in (1, 2, 4, 8):
        settings[f"K={k}"] = settings["default"].with_(adaptive=False, draft_max=k)
    for spec in settings.values():
        run(engine, prompt, spec.with_(max_tokens=8))
    got: dict[str, list] = {name: [] for name in settings}
    for _ in range(runs):
        for name, spec in settings.items():
            engine.reset()
            got[name].append(run(engine, prompt, spec))
    out = {}
    for name, dones in got.items():
        s = [d.summary for d in dones]
        out[name] = {"tps": round(statistics.median(x.tokens_per_second for x in s), 1),
                     "acceptance": round(statistics.median(x.acceptance_rate for x in s), 3),
                     "drafted": statistics.median(x.drafted for x in s),
                     "py_ms_per_token": round(statistics.median(python_ms_per_token(d) for d in dones), 4)}
        if name == "default":
            out[name]["policy"] = {k: dones[-1].policy.get(k) for k in KEEP}
    return out


PROBES = {   # name: TinySpec arguments (tests/conftest.py's tiny_target first)
    "tiny-f32-64": {},
    "tiny-f16-64": {"f16": True},
    "tiny-f32-256": {"n_embd": 256, "n_ff": 512, "n_head": 4, "n_head_kv": 2},
    "tiny-f16-256": {"n_embd": 256, "n_ff": 512, "n_head": 4, "n_head_kv": 2, "f16": True},
    "tiny-f32-64-big-vocab": {"extra_tokens": 151936 - 3 - 256 - len(bpe_vocab()[1])},
    # (on an H200 every one above crashed, log ending at print_info's n_layer_all; the
    # 16-layer 2048-wide pair, head size 128, loads): which of layers and head size it is
    "tiny-f32-64-16-layers": {"n_layer": 16},
    "tiny-f32-64-ctx-4096": {"n_ctx_train": 4096},
    "tiny-f32-256-head-128": {"n_embd": 256, "n_ff": 512, "n_head": 2, "n_head_kv": 1},
    "tiny-f16-2048-2-layers": {"n_embd": 2048, "n_ff": 4096, "n_head": 16, "n_head_kv": 4, "f16": True,
                               "n_layer": 2},
}

LOAD_ONE = """
import faulthandler, sys
faulthandler.enable()
sys.path[:0] = [sys.argv[3], sys.argv[4]]
import json
from tiny import TinySpec, write_model
from localspec.engine import Engine, EngineConfig
path = write_model(sys.argv[1], TinySpec(**json.loads(sys.argv[2])))
print("written", path, flush=True)
with Engine(EngineConfig(target=str(path), n_ctx=256)) as e:
    print("loaded", e.describe()["target"].get("backend"), flush=True)
    print("tokens", len(e.tokenize("The quick brown fox")), flush=True)
"""


def load_probe(work: Path) -> int:
    """Each of PROBES loaded in its own process: one JSON line each."""
    env = dict(os.environ, LOCALSPEC_LLAMA_LOG="1")
    crashed = False
    for name, kw in PROBES.items():
        try:
            r = subprocess.run([sys.executable, "-c", LOAD_ONE, str(work / f"{name}.gguf"), json.dumps(kw),
                                str(ROOT / "tests"), str(ROOT)], capture_output=True, text=True, timeout=120, env=env)
            rc, out, err = r.returncode, r.stdout, r.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "timeout", str(e.stdout or ""), str(e.stderr or "")
        row = {"probe": name, "spec": kw, "rc": rc, "stdout": out.splitlines()[-4:],
               "stderr_tail": err.splitlines()[-40:]}
        if rc not in (0, "timeout") and shutil.which("cuda-gdb") and not crashed:
            crashed = True   # the first crash's native stack (cuda-gdb debugs host code too)
            try:
                g = subprocess.run(["cuda-gdb", "-batch", "-ex", "run", "-ex", "bt 40", "--args", sys.executable,
                                    "-c", LOAD_ONE, str(work / f"{name}-gdb.gguf"), json.dumps(kw),
                                    str(ROOT / "tests"), str(ROOT)], capture_output=True, text=True, timeout=120)
                row["native_stack"] = [x for x in g.stdout.splitlines() if x.startswith("#")][:40]
            except (subprocess.TimeoutExpired, OSError) as e:
                row["native_stack"] = [f"cuda-gdb failed: {e}"]
        print(json.dumps(row), flush=True)
    return 0


def first_decodes(engine: Engine, prompt: list[int], drafter: DrafterKind, answers: int = 3) -> dict:
    """Each batch size's verify seconds in order, per answer, over ``answers`` answers in a row
    at each fixed K of 1, 3 and 8 (the policy's open question: is a size's dear first decode
    paid once per answer, once per context, or once per process?)."""
    greedy = SamplingConfig(temperature=0.0)
    out: dict = {}
    for k in (1, 3, 8):
        spec = RunSpec(drafter=drafter, sampling=greedy, max_tokens=48, adaptive=False, draft_max=k)
        rows = []
        for _ in range(answers):
            engine.reset()
            by_size: dict[str, list[float]] = {}
            for ev in engine.run(prompt, spec):
                if isinstance(ev, Step) and ev.verify_batch:
                    by_size.setdefault(str(ev.verify_batch), []).append(round(ev.verify_seconds * 1000, 3))
            rows.append({b: xs[:4] for b, xs in by_size.items()})
        out[f"K={k}"] = rows
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--load-probe", action="store_true", help="which tiny test models load offloaded")
    ap.add_argument("--first-decodes", action="store_true",
                    help="each batch size's first decodes (ms), answer after answer, at fixed K")
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gpu-diag-"))
    if a.load_probe:
        return load_probe(work)
    width, layers = a.width, a.layers
    base = 3 + 256 + len(bpe_vocab()[1])
    zoo = TinyZoo(work)
    big = TinySpec(n_embd=width, n_ff=width * 11 // 4, n_layer=layers, n_head=max(2, width // 128),
                   n_head_kv=max(1, width // 512), bigram_seed=5, layer_gain=0.05, f16=True,
                   extra_tokens=151936 - base, n_ctx_train=4096)
    small = TinySpec(n_embd=256, n_ff=512, n_layer=2, n_head=4, n_head_kv=2, bigram_seed=5, layer_gain=0.05,
                     f16=True, extra_tokens=151936 - base, n_ctx_train=4096)
    q35 = qwen35_spec(n_embd=width // 2, n_layer=max(4, layers // 2), n_head=max(4, width // 256), n_head_kv=2,
                      head_dim=128, n_rot=32, n_ff=width, d_state=64, n_k_heads=4, n_v_heads=8, mtp=True,
                      bigram_seed=5, layer_gain=0.05, f16=True)
    pairs = [("mtp", EngineConfig(target=str(write_model(work / "q35.gguf", q35)), mtp=True, n_ctx=4096),
              DrafterKind.MTP),
             ("draft model", EngineConfig(target=str(zoo.get(big, "big.gguf")), draft=str(zoo.get(small, "small.gguf")),
                                          n_ctx=4096), DrafterKind.MODEL)]
    for name, config, drafter in pairs:
        with Engine(config) as e:
            prompt = e.tokenize("The quick brown fox")
            res = {"pair": name, "backend": e.describe()["target"]["backend"],
                   **(first_decodes(e, prompt, drafter) if a.first_decodes
                      else cells(e, prompt, drafter, a.tokens, a.runs))}
        print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
