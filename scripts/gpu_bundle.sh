#!/usr/bin/env bash
# What scripts/gpu_check.sh needs on a GPU machine that cannot reach PyPI, gathered here into
# .gpu/ (git-ignored; small enough to travel with the working tree):
#
#   scripts/gpu_bundle.sh            # then, on the GPU machine: scripts/gpu_check.sh
#
# - llama-cpp-python 0.3.36's source (the sdist from pip's cache or PyPI) without what the
#   build never reads: a git pack of llama.cpp's history, the vendored llama.cpp's vocabulary
#   models, docs, benches, server and web UI (the sdist is 77 MB, more than a working tree
#   may carry);
# - wheels of the pure-Python packages localspec's engine, CLI and tests import that a
#   typical CUDA image lacks (gguf, platformdirs, diskcache).
# gpu_check.sh uses .gpu/ when it is there: it builds from that source without build
# isolation (scikit-build-core, CMake and ninja from the machine's Python) and installs the
# wheels with --no-index. The SmolLM2 file (98 MB) does not travel: its pair is skipped there.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-.gpu}
LLAMA_VERSION=0.3.36
WHEELS=(gguf platformdirs diskcache)

rm -rf "$OUT"
mkdir -p "$OUT/wheels"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" -d "$WORK"
tar -xzf "$WORK"/llama_cpp_python-"$LLAMA_VERSION".tar.gz -C "$WORK"
SRC="$WORK/llama_cpp_python-$LLAMA_VERSION"
VENDOR="$SRC/vendor/llama.cpp"
# Built as a subproject, llama.cpp builds no tools, examples or tests of its own (llama-cpp-python
# adds tools/mtmd itself).
rm -rf "$SRC/.git" "$VENDOR/.git" "$VENDOR/models" "$VENDOR/docs" "$VENDOR/benches" "$VENDOR/media" \
       "$VENDOR/tools/ui" "$VENDOR/tools/server" "$SRC/docs" "$SRC/examples"
tar -czf "$OUT/llama_cpp_python-$LLAMA_VERSION-src.tar.gz" -C "$WORK" "llama_cpp_python-$LLAMA_VERSION"

# Versions that suit the Python there (3.12 on this workplace's CUDA image): pure-Python wheels.
python3 -m pip download -q --no-deps --only-binary=:all: -d "$OUT/wheels" "${WHEELS[@]}"
du -sh "$OUT" "$OUT"/* >&2
echo "gpu_bundle: wrote $OUT (carry it to the GPU machine with the working tree)" >&2
