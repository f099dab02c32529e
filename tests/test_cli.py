"""The real `localspec` command: output, JSON, and one-line errors with non-zero exits."""

import json

import pytest
from conftest import run_cli

# One llama.cpp thread per context: target and draft spinning on every core of a small shared
# machine slow the tiny models many times over.
pytestmark = pytest.mark.usefixtures("one_llama_thread")


def assert_one_line_error(r, code=None, match=None):
    assert r.returncode != 0
    if code is not None:
        assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("localspec: error:")
    if match:
        assert match in lines[0], lines[0]


def test_run_streams_text_and_stats(tiny_target, tiny_draft):
    r = run_cli("run", "-m", str(tiny_target), "-d", str(tiny_draft), "-p", "The quick brown", "-n", "30",
                "--temp", "0")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.strip()) > 0
    assert "tok/s" in r.stderr and "acceptance" in r.stderr and "backend CPU" in r.stderr


def test_run_json(tiny_target, tiny_draft):
    r = run_cli("run", "-m", str(tiny_target), "-d", str(tiny_draft), "-p", "The quick brown", "-n", "25",
                "--temp", "0.8", "--seed", "7", "--fixed-k", "--draft-max", "3", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert len(data["token_ids"]) == 25
    assert data["stop_reason"] == "max_tokens"
    s = data["stats"]
    for key in ("tokens_per_second", "time_to_first_token", "prompt_seconds", "acceptance_rate",
                "mean_accepted_length", "acceptance_by_position", "drafted", "accepted"):
        assert key in s
    assert s["k_max"] == 3
    assert data["sampling"]["seed"] == 7
    assert data["engine"]["target"]["backend"] == "CPU"
    again = json.loads(run_cli(*r.args[3:]).stdout)
    assert again["token_ids"] == data["token_ids"], "same seed, same output"


def test_run_chat_and_stdin_prompt(tiny_target):
    r = run_cli("run", "-m", str(tiny_target), "--ngram", "-p", "-", "--chat", "-n", "8", "--json",
                input="hello there")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["stats"]["n_prompt"] > 5
    assert data["stats"]["drafter"] == "ngram"


def test_compare(tiny_target, tiny_draft):
    r = run_cli("compare", "-m", str(tiny_target), "-d", str(tiny_draft), "-p", "Once upon a time",
                "-n", "40", "--fixed-k", "--draft-max", "4")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "target only" in out and "speculative" in out and "speed-up" in out
    assert "outputs     : identical (40 tokens)" in out
    r = run_cli("compare", "-m", str(tiny_target), "-d", str(tiny_draft), "-p", "Once upon a time",
                "-n", "20", "--json")
    data = json.loads(r.stdout)
    assert data["identical"] is True
    assert data["speedup"] > 0
    assert data["target_only"]["drafted"] == 0 and data["speculative"]["n_generated"] == 20


@pytest.mark.parametrize("args,match", [
    (["--temp", "-0.5"], "--temp"),
    (["--draft-max", "0"], "--draft-max"),
    (["--draft-max", "-2"], "--draft-max"),
    (["--top-p", "1.5"], "--top-p"),
    (["--draft-min", "5", "--draft-max", "3"], "--draft-min"),
    (["-n", "-1"], "--max-tokens"),
    (["--ctx", "abc"], "--ctx"),
])
def test_bad_flag_values(tiny_target, tiny_draft, args, match):
    r = run_cli("run", "-m", str(tiny_target), "-d", str(tiny_draft), "-p", "hi", *args)
    assert_one_line_error(r, 2, match)


def test_missing_and_non_gguf_models(tiny_target, tmp_path):
    r = run_cli("run", "-m", str(tmp_path / "nope.gguf"), "--no-draft", "-p", "hi")
    assert_one_line_error(r, 2, "no such file")
    junk = tmp_path / "junk.gguf"
    junk.write_text("not a model at all")
    r = run_cli("run", "-m", str(tiny_target), "-d", str(junk), "-p", "hi")
    assert_one_line_error(r, 2, "not a GGUF file")
    r = run_cli("run", "-m", str(junk), "--no-draft", "-p", "hi")
    assert_one_line_error(r, 2, "junk.gguf")


def test_incompatible_pair_is_refused(zoo, tiny_target):
    from tiny import TinySpec

    other = zoo.get(TinySpec(vocab_shuffle=7), "other-vocab.gguf")
    r = run_cli("run", "-m", str(tiny_target), "-d", str(other), "-p", "hi")
    assert_one_line_error(r, 1, "incompatible pair: token texts")


def test_prompt_longer_than_context(tiny_target):
    r = run_cli("run", "-m", str(tiny_target), "--no-draft", "--ctx", "64", "-p", "the quick brown fox " * 100)
    assert_one_line_error(r, 1, "context holds 256")


def test_drafter_choice_errors(tiny_target, tiny_draft):
    assert_one_line_error(run_cli("run", "-m", str(tiny_target), "-p", "hi"), 2, "no drafter")
    assert_one_line_error(run_cli("run", "-m", "no-such-model", "-p", "hi"), 2, "no such file or local model")
    assert_one_line_error(run_cli("run", "-m", str(tiny_target), "-d", str(tiny_draft), "--ngram", "-p", "hi"),
                          2, "choose one")
    assert_one_line_error(run_cli("run", "-m", str(tiny_target), "--no-draft"), 2, "no prompt")


def test_context_full_is_a_message_not_a_crash(tiny_target, tiny_draft):
    r = run_cli("run", "-m", str(tiny_target), "-d", str(tiny_draft), "--ctx", "64", "-p", "The quick",
                "-n", "1000", "--temp", "0")
    assert r.returncode == 0, r.stderr
    assert "context full" in r.stderr
    assert "Traceback" not in r.stderr


def test_help_and_info():
    r = run_cli("--help")
    assert r.returncode == 0 and "run" in r.stdout and "compare" in r.stdout and "check" in r.stdout
    r = run_cli("info", "--json")
    assert r.returncode == 0
    assert json.loads(r.stdout)["backend"] in ("CPU", "CUDA", "Metal", "Vulkan", "GPU", "ROCm", "HIP", "SYCL")
    r = run_cli("nonsense")
    assert_one_line_error(r, 2)


def test_every_command_that_takes_a_pair_accepts_m_and_d():
    import importlib

    cli_main = importlib.import_module("localspec.cli.main")
    cli_main._register()
    for name in ("run", "compare", "chat", "bench", "tune", "check"):
        opts = {o for p in cli_main.cli.commands[name].params for o in getattr(p, "opts", [])}
        assert {"-m", "--model", "-d", "--draft"} <= opts, name


def test_chat_refuses_two_different_targets(tiny_target, tiny_draft):
    r = run_cli("chat", str(tiny_target), "-m", str(tiny_draft))
    assert_one_line_error(r, code=2, match="two targets given")
