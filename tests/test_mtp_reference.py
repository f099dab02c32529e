"""localspec's MTP drafting against llama.cpp's own: ``llama-speculative-simple --spec-type
draft-mtp``, built from the llama.cpp that llama-cpp-python vendors (scripts/build_reference.sh),
on the same tiny qwen35 model, prompt and draft length, greedy.

Both must emit the same tokens, and every verify round must draft and accept the same number
of tokens (llama.cpp's per-round "accepted A/N draft tokens" debug lines against localspec's
Step events), so the total accepted is the same too. The binary is built here on first use
when it is missing (minutes); .ci/run builds it before the tests and caches it in
.cache/reference (git-ignored), so this test never skips.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from test_mtp import MTP_TARGET
from tiny_qwen35 import write_qwen35_model

from localspec.engine import Engine, EngineConfig, RunSpec, SamplingConfig, Step
from localspec.engine.events import Done, StopReason

ROOT = Path(__file__).resolve().parent.parent
BINARY = "llama-speculative-simple"
PROMPT = "The quick brown fox"
N = 64


def reference_binary() -> Path:
    env = os.environ.get("LOCALSPEC_REFERENCE_BIN")
    if env:
        return Path(env)
    built = ROOT / ".cache" / "reference" / "build" / "bin" / BINARY
    if not built.is_file():
        out = subprocess.run(["bash", str(ROOT / "scripts" / "build_reference.sh")], cwd=ROOT,
                             capture_output=True, text=True, timeout=3600)
        assert out.returncode == 0, f"building the reference failed: {out.stderr[-2000:]}"
        built = Path(out.stdout.strip().splitlines()[-1])
    return built


@pytest.fixture(scope="module")
def binary() -> Path:
    b = reference_binary()
    assert b.is_file(), f"{b}: no reference binary (scripts/build_reference.sh builds it)"
    return b


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_qwen35_model(tmp_path_factory.mktemp("mtp-ref") / "q35-mtp.gguf", MTP_TARGET)


def run_reference(binary: Path, model: Path, k: int) -> tuple[str, list[tuple[int, int]], dict]:
    """(generated text, per-round (accepted, drafted), totals) from llama.cpp."""
    cmd = [str(binary), "-m", str(model), "--spec-type", "draft-mtp", "--spec-draft-n-max", str(k),
           "--spec-draft-n-min", "0", "--spec-draft-p-min", "0", "-p", PROMPT, "-n", str(N), "--temp", "0",
           "-t", "1", "-c", "512", "-s", "1", "-lv", "5", "--no-warmup"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stdout + out.stderr
    rounds = [(int(a), int(n)) for a, n in re.findall(r"accepted (\d+)/(\d+) draft tokens", log)]
    totals = {k: int(v) for k, v in re.findall(r"\b(n_drafted|n_accept|n_predict)\s*=\s*(\d+)", log)}
    text = out.stdout.split(PROMPT, 1)[1] if PROMPT in out.stdout else ""
    return text, rounds, totals


def run_localspec(model: Path, k: int) -> tuple[Done, list[Step]]:
    with Engine(EngineConfig(target=str(model), mtp=True, n_ctx=512, threads=1, rollback_depth=k + 1)) as e:
        spec = RunSpec.of(drafter="mtp", adaptive=False, draft_max=k, max_tokens=N,
                          sampling=SamplingConfig(temperature=0.0))
        events = list(e.run(e.tokenize(PROMPT), spec))
    return events[-1], [ev for ev in events if isinstance(ev, Step)]


@pytest.mark.parametrize("k", [1, 3, 5])
def test_same_tokens_and_acceptance_as_llama_cpp(binary, model, k):
    text, rounds, totals = run_reference(binary, model, k)
    done, steps = run_localspec(model, k)
    assert done.stop_reason is StopReason.MAX_TOKENS and len(done.token_ids) == N
    assert rounds, "llama.cpp printed no per-round acceptance (debug log missing?)"
    # llama.cpp goes one round past N tokens; every round localspec made must match it.
    ours = [(st.accepted, st.drafted) for st in steps]
    assert ours == rounds[:len(ours)], f"K={k}: localspec {ours} vs llama.cpp {rounds}"
    assert sum(a for a, _ in ours) == sum(a for a, _ in rounds[:len(ours)])
    assert 0 < sum(a for a, _ in ours) < sum(n for _, n in ours), "partial acceptance, not a trivial case"
    # The same text: llama.cpp prints its tokens (a few past N) after the prompt.
    assert text.startswith(done.text), f"K={k}: {done.text!r} vs {text!r}"
    assert totals["n_accept"] == sum(a for a, _ in rounds)
