#!/usr/bin/env bash
# Build llama-cpp-python with llama.cpp's RPC backend (CMAKE_ARGS="-DGGML_RPC=on") once, into
# .cache/rpc-wheel, and print the wheel's path; later runs reuse the wheel (seconds).
# Usage: scripts/build_rpc_wheel.sh [OUT_DIR]   (LLAMA_CPP_PYTHON_VERSION=... to change 0.3.36)
# About 6-8 minutes on 2 cores the first time. Extra CMAKE_ARGS are kept (e.g. -DGGML_CUDA=on).
set -euo pipefail
out="${1:-.cache/rpc-wheel}"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
wheel="$(ls "$out"/llama_cpp_python-"$version"-*.whl 2>/dev/null | head -n 1 || true)"
if [[ -z "$wheel" ]]; then
  CMAKE_ARGS="-DGGML_RPC=on ${CMAKE_ARGS:-}" python -m pip wheel --quiet --no-deps --no-cache-dir \
    --no-binary llama-cpp-python -w "$out" "llama-cpp-python==$version" >"$out/build.log" 2>&1 \
    || { tail -n 30 "$out/build.log" >&2; exit 1; }
  wheel="$(ls "$out"/llama_cpp_python-"$version"-*.whl | head -n 1)"
fi
echo "$wheel"
