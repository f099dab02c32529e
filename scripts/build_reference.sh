#!/usr/bin/env bash
# Build llama.cpp's own tools (default `llama-speculative-simple`; `llama-server` for
# scripts/bench_server.py) from the llama.cpp that the installed llama-cpp-python's sdist
# vendors, so localspec can be measured against the same code.
# Usage: scripts/build_reference.sh [OUT_DIR] [TARGET]   (default: .cache/reference)
# Prints the path of the binary. Takes ~10 minutes on 2 cores; reruns reuse the build.
set -euo pipefail
out="${1:-.cache/reference}"
target="${2:-llama-speculative-simple}"
server=OFF
[[ "$target" == llama-server ]] && server=ON
mkdir -p "$out"
out="$(cd "$out" && pwd)"
version="$(python -c 'import llama_cpp; print(llama_cpp.__version__)')"
if [[ ! -d "$out/src" ]]; then
  python -m pip download --quiet --no-deps --no-binary :all: -d "$out/sdist" "llama-cpp-python==$version"
  mkdir -p "$out/src"
  tar xzf "$out"/sdist/llama_cpp_python-*.tar.gz -C "$out/src" --strip-components=1
fi
cmake -S "$out/src/vendor/llama.cpp" -B "$out/build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$server \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF ${CMAKE_ARGS:-} >"$out/cmake.log" 2>&1
cmake --build "$out/build" --target "$target" -j "$(nproc)" >"$out/build.log" 2>&1
echo "$out/build/bin/$target"
