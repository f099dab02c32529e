#!/usr/bin/env bash
# The lowest versions pyproject.toml allows of the libraries localspec's Hub and state-file code
# call (huggingface-hub, filelock, tqdm), put in front of the main venv's in a folder of their
# own, and the tests of that code (the pull through a fake Hub, the locked state files, the
# progress bars) run against them. Exits non-zero when a test fails or a bound is missing.
#
# Usage: bash scripts/ci_lowest_deps.sh   (from any folder; PYTHON overrides .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
DIR=.cache/lowest-deps

lowest="$("$PY" - <<'PYEOF'
import re
import tomllib

deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
want = {"huggingface-hub", "filelock", "tqdm"}
pins = {}
for d in deps:
    m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,;\s]*)", d.split(";")[0].strip())
    if m and m.group(1).lower() in want:
        pins[m.group(1).lower()] = m.group(2)
missing = want - set(pins)
if missing:
    raise SystemExit(f"pyproject.toml gives no lower bound for {sorted(missing)}")
print(" ".join(f"{name}=={version}" for name, version in sorted(pins.items())))
PYEOF
)"
echo "lowest allowed: $lowest"

rm -rf "$DIR"
# shellcheck disable=SC2086  # one argument per requirement
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target "$DIR" $lowest
# huggingface-hub 1.x speaks HTTP through httpx (2.x through httpx2, which the main venv has).
"$PY" -m pip install --quiet --disable-pip-version-check --upgrade --target "$DIR" "httpx>=0.23,<1"

PYTHONPATH="$DIR" "$PY" - "$lowest" <<'PYEOF'
import sys
from importlib.metadata import version

for pin in sys.argv[1].split():
    name, want = pin.split("==")
    got = version(name)
    assert got == want or got.startswith(want + "."), f"{name} {got}, not {want}"
    print(f"  {name} {got}")
PYEOF
PYTHONPATH="$DIR" "$PY" -m pytest -q -p no:cacheprovider tests/test_pull.py tests/test_state_files.py tests/test_progress.py
