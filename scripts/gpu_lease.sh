#!/usr/bin/env bash
# Every GPU check in one short lease (under 10 minutes on an H200, the CUDA build included),
# each step under its own time limit so that one that hangs or crashes leaves the others'
# results; everything lands in OUT_DIR. GPU_LEASE_SECONDS (590) bounds the whole; the last
# step gets what is left.
#
#   scripts/gpu_lease.sh OUT_DIR
#
# 1. build.log: the CUDA build (scripts/gpu_check.sh, GPU_CHECK_BUILD_ONLY=1).
# 2. diag.jsonl: the policy on the GPU (scripts/gpu_diag.py): target alone, the default and
#    fixed K on a 1B-class generated pair and a qwen35 target with its MTP head.
# 3. first.jsonl: each batch size's first decodes, answer after answer (gpu_diag --first-decodes).
# 4. load.jsonl: which tiny test models load with every layer offloaded (gpu_diag --load-probe).
# 5. greedy.log: tests/test_engine_greedy.py offloaded, Python's fault handler on.
# 6. layered.json: whether a layered draft pays on the GPU (scripts/bench_layered.py).
# 7. gpu-check.json and gpu-check.log: scripts/gpu_check.sh's benchmark (GPU_CHECK_RUNS=2).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT_DIR=${1:?usage: scripts/gpu_lease.sh OUT_DIR}
mkdir -p "$OUT_DIR"
export PYTHONFAULTHANDLER=1 PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
step() { echo "gpu_lease: $* (${SECONDS}s in)" >&2; }

step "build"
GPU_CHECK_BUILD_ONLY=1 timeout 400 bash scripts/gpu_check.sh >"$OUT_DIR/build.log" 2>&1 || {
    tail -n 30 "$OUT_DIR/build.log" >&2; exit 2; }
PY=python3
[ -d "${GPU_BUNDLE:-.gpu}" ] || PY="${VENV:-.venv-gpu}/bin/python"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT_DIR/gpu.txt" 2>&1

step "policy on the GPU"
timeout 110 "$PY" scripts/gpu_diag.py --tokens 256 --runs 2 >"$OUT_DIR/diag.jsonl" 2>"$OUT_DIR/diag.log"
step "first decodes"
timeout 60 "$PY" scripts/gpu_diag.py --first-decodes >"$OUT_DIR/first.jsonl" 2>"$OUT_DIR/first.log"
step "load probe"
timeout 50 "$PY" scripts/gpu_diag.py --load-probe >"$OUT_DIR/load.jsonl" 2>&1
step "greedy tests"
timeout 40 "$PY" -m pytest -q -x -p no:cacheprovider tests/test_engine_greedy.py >"$OUT_DIR/greedy.log" 2>&1
step "layered drafts"
timeout 45 "$PY" scripts/bench_layered.py --runs 2 -k 8 >"$OUT_DIR/layered.json" 2>"$OUT_DIR/layered.log"
step "gpu_check's benchmark"
GPU_CHECK_RUNS=${GPU_CHECK_RUNS:-2} GPU_CHECK_TESTS=${GPU_CHECK_TESTS:-tests/test_mtp.py} \
    GPU_CHECK_TEST_SECONDS=${GPU_CHECK_TEST_SECONDS:-30} \
    timeout $(( ${GPU_LEASE_SECONDS:-590} - SECONDS > 10 ? ${GPU_LEASE_SECONDS:-590} - SECONDS : 10 )) bash scripts/gpu_check.sh "$OUT_DIR/gpu-check.json" \
    >"$OUT_DIR/gpu-check.log" 2>&1
step "done"
