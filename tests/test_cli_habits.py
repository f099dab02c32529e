"""The command line as llama.cpp's and Ollama's users type it: llama.cpp's flags as aliases
(-c, -t, -ngl, -ngld, -md, -s, --ctx-size, --n-gpu-layers, --model-draft, --draft-p-min), a
positional MODEL, serve's run defaults and strictness/CORS flags, LOCALSPEC_<OPTION>
environment variables for serve, and `bench --json` on stdout."""

from __future__ import annotations

import contextlib
import http.client
import json
import signal

import pytest
from conftest import run_cli, start_serve

ALIASES = {"-c", "--ctx", "--ctx-size", "-t", "--threads", "-ngl", "--gpu-layers", "--n-gpu-layers", "-ngld",
           "--gpu-layers-draft", "--n-gpu-layers-draft", "-md", "--model-draft", "-d", "--draft"}
RUN_ALIASES = {"--temp", "--temperature", "-s", "--seed", "--draft-max", "--draft-min", "--p-min", "--draft-p-min"}


def one_line_error(r, code, match):
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("localspec: error:") and match in lines[0], r.stderr


def test_every_pair_command_takes_llama_cpp_flags_and_a_positional_model():
    import importlib

    cli_main = importlib.import_module("localspec.cli.main")
    cli_main._register()
    for name in ("run", "compare", "serve", "bench", "tune", "chat"):
        cmd = cli_main.cli.commands[name]
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert ALIASES <= opts, (name, ALIASES - opts)
        if name in ("run", "compare", "serve", "chat"):
            assert RUN_ALIASES <= opts, (name, RUN_ALIASES - opts)
        args = [p for p in cmd.params if p.param_type_name == "argument"]
        assert len(args) == 1 and not args[0].required, name


def test_run_with_llama_cpp_flags(tiny_target, tiny_draft):
    """-md, -c, -t, -ngl, -ngld, -s, --temp (also as the OpenAI API names it, --temperature),
    --draft-max, --draft-min, --draft-p-min each reach the engine or the run; `-ngl 99` is the
    GPU layers, not -n with "gl"."""
    r = run_cli("run", str(tiny_target), "-md", str(tiny_draft), "-c", "256", "-t", "1", "-ngl", "99", "-ngld", "0",
                "-s", "7", "--temp", "0.5", "--draft-max", "3", "--draft-min", "2", "--draft-p-min", "0.1",
                "-p", "The quick", "-n", "6", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    engine, spec = data["engine"], data["spec"]
    assert engine["n_ctx"] == 256 and engine["threads"] == 1
    assert engine["draft"]["gpu_layers"] == 0 and engine["draft"]["path"] == str(tiny_draft)
    assert data["sampling"]["seed"] == 7 and data["sampling"]["temperature"] == 0.5
    assert (spec["draft_max"], spec["draft_min"], spec["p_min"], spec["adaptive"]) == (3, 2, 0.1, False)
    assert len(data["token_ids"]) == 6
    long = run_cli("run", "--model", str(tiny_target), "--model-draft", str(tiny_draft), "--ctx-size", "512",
                   "--n-gpu-layers", "0", "--n-gpu-layers-draft", "0", "--seed", "7", "--temperature", "0.5",
                   "--draft-max", "3", "--draft-min", "2", "--draft-p-min", "0.1", "-p", "The quick", "-n", "6",
                   "--json", "-t", "1")
    assert long.returncode == 0, long.stderr
    again = json.loads(long.stdout)
    assert again["engine"]["n_ctx"] == 512 and again["engine"]["target"]["gpu_layers"] == 0
    assert again["sampling"]["temperature"] == 0.5
    assert again["token_ids"] == data["token_ids"]        # the same seed and settings: the same answer


def test_positional_model_for_run_and_compare(tiny_target, tiny_draft):
    r = run_cli("run", str(tiny_target), "--ngram", "-p", "hi", "-n", "3", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["engine"]["target"]["path"] == str(tiny_target)
    r = run_cli("compare", str(tiny_target), "-d", str(tiny_draft), "-p", "Once upon", "-n", "8", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["identical"] is True
    one_line_error(run_cli("run", str(tiny_target), "-m", str(tiny_draft), "--ngram", "-p", "hi"), 2,
                   "two targets given")
    assert run_cli("run", str(tiny_target), "-m", str(tiny_target), "--ngram", "-p", "hi", "-n", "2").returncode == 0


def test_positional_model_for_tune(tiny_target, tiny_draft):
    r = run_cli("tune", str(tiny_target), "-md", str(tiny_draft), "--reset")
    assert r.returncode == 0 and "forgot 0 tuned settings" in r.stdout, r.stderr
    one_line_error(run_cli("tune", str(tiny_target), "-m", str(tiny_draft), "--reset"), 2, "two targets given")


def _prompts(tmp_path):
    p = tmp_path / "prompts.jsonl"
    p.write_text(json.dumps({"id": "a", "category": "chat", "prompt": "The quick brown fox"}))
    return str(p)


def test_bench_json_on_stdout_and_out_file(tiny_target, tiny_draft, tmp_path):
    common = ["--draft-max", "2", "--policy", "fixed", "--runs", "1", "-n", "4", "--prompts", _prompts(tmp_path),
              "-s", "3", "--draft-p-min", "0.2", "-c", "128", "-t", "1"]
    r = run_cli("bench", str(tiny_target), "-md", str(tiny_draft), *common, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)                               # nothing but the JSON on stdout
    assert data["complete"] is True and data["seed"] == 3
    assert [c["label"] for c in data["cells"]] == ["model, K=2, p-min 0.2"]
    out = tmp_path / "b.json"
    r = run_cli("bench", str(tiny_target), "-md", str(tiny_draft), *common, "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "speed-up" in r.stdout and json.loads(out.read_text())["complete"] is True
    one_line_error(run_cli("bench", "-m", str(tiny_target), "-d", str(tiny_draft), "--json", str(out)), 2,
                   f"--out {out} writes them to a file")


# -- serve: flags and environment variables, read back from /props -------------------------------

@contextlib.contextmanager
def served(*args, env=None):
    """`localspec serve ARGS --port 0` in a subprocess: yields its port; SIGTERM after."""
    proc, base, line = start_serve(*args, "--quiet", env={"LOCALSPEC_PORT": "0", **(env or {})})
    try:
        yield int(base.rsplit(":", 1)[1]), line
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()


def get(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    return resp.status, resp.headers, json.loads(text) if text.startswith(("{", "[")) else text


def test_serve_flags_set_the_defaults(tiny_target, tiny_draft):
    """A positional MODEL, -md, -c, -t, the run defaults (--temp, --top-k, --top-p, --min-p,
    -s, --draft-min, --p-min, --fixed-k), --name, --strict-model and --cors."""
    with served(str(tiny_target), "-md", str(tiny_draft), "-c", "768", "-t", "1", "--temp", "0.3", "--top-k", "7",
                "--top-p", "0.5", "--min-p", "0.01", "-s", "5", "--draft-min", "2", "--p-min", "0.2", "--fixed-k",
                "--name", "pair", "--strict-model", "--cors", "https://app.example,http://10.0.0.2:3000") as (port, _):
        status, _, props = get(port, "GET", "/props")
        assert status == 200
        gen = props["default_generation_settings"]
        p = gen["params"]
        assert gen["n_ctx"] == 768 and props["model_path"] == str(tiny_target)
        assert (p["temperature"], p["top_k"], p["top_p"], p["min_p"], p["seed"]) == (0.3, 7, 0.5, 0.01, 5)
        assert (p["speculative.n_max"], p["speculative.n_min"], p["speculative.p_min"]) == (8, 2, 0.2)
        assert p["speculative.adaptive"] is False and p["speculative.drafter"] == "model"
        status, _, out = get(port, "POST", "/v1/completions", {"model": "gpt-4o-mini", "prompt": "hi"})
        assert status == 404 and "not served here" in out["error"]["message"]
        status, _, out = get(port, "POST", "/v1/completions", {"model": "pair", "prompt": "hi", "max_tokens": 2})
        assert status == 200 and out["model"] == "pair"
        for origin in ("https://app.example", "http://10.0.0.2:3000", "http://localhost:5173"):
            status, headers, _ = get(port, "OPTIONS", "/v1/chat/completions", headers={
                "Origin": origin, "Access-Control-Request-Method": "POST"})
            assert status == 200 and headers["Access-Control-Allow-Origin"] == origin
        assert get(port, "OPTIONS", "/v1/models", headers={
            "Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})[0] == 403


def test_serve_draft_length_and_temperature(tiny_target):
    """--draft-max alone drafts exactly that many every round (as for run); --draft-temp and
    --ngram reach the server's defaults too."""
    with served(str(tiny_target), "--ngram", "--draft-max", "6", "--draft-temp", "0.4", "-t", "1") as (port, _):
        p = get(port, "GET", "/props")[2]["default_generation_settings"]["params"]
        assert (p["speculative.n_max"], p["speculative.adaptive"], p["speculative.drafter"]) == (6, False, "ngram")
        assert p["speculative.draft_temperature"] == 0.4


def test_serve_options_from_the_environment(tiny_target, tiny_draft):
    """LOCALSPEC_<OPTION> sets any serve option (a drafting setting counts as given, as its
    flag would); a flag on the command line wins over its variable."""
    env = {"LOCALSPEC_MODEL": str(tiny_target), "LOCALSPEC_DRAFT": str(tiny_draft), "LOCALSPEC_CTX": "1024",
           "LOCALSPEC_THREADS": "1", "LOCALSPEC_TEMP": "0.25", "LOCALSPEC_DRAFT_MAX": "5", "LOCALSPEC_TOP_K": "3",
           "LOCALSPEC_NAME": "from-env", "LOCALSPEC_CORS": "https://env.example", "LOCALSPEC_QUEUE": "2"}
    with served("--top-k", "9", env=env) as (port, line):
        assert "serving from-env" in line
        props = get(port, "GET", "/props")[2]
        p = props["default_generation_settings"]["params"]
        assert props["default_generation_settings"]["n_ctx"] == 1024
        assert (p["temperature"], p["speculative.n_max"], p["speculative.adaptive"], p["top_k"]) == (0.25, 5, False, 9)
        status, headers, _ = get(port, "OPTIONS", "/v1/models", headers={
            "Origin": "https://env.example", "Access-Control-Request-Method": "GET"})
        assert status == 200 and headers["Access-Control-Allow-Origin"] == "https://env.example"
        # no --strict-model: any name is answered, by the pair's own name
        status, _, out = get(port, "POST", "/v1/completions", {"model": "gpt-4o-mini", "prompt": "hi", "max_tokens": 2})
        assert status == 200 and out["model"] == "from-env"


@pytest.mark.parametrize("args,match", [
    (["--cors", "app.example"], "--cors: 'app.example' is not an origin"),
    (["--cors", "https://app.example/"], "is not an origin"),
    (["-ngl", "-5"], "-ngl"),
    (["-c", "abc"], "-c"),
])
def test_serve_flag_errors(tiny_target, args, match):
    one_line_error(run_cli("serve", str(tiny_target), "--no-draft", "--port", "0", *args), 2, match)
