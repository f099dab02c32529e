"""Commands that never run a model do not load llama.cpp: `localspec --help`, a command's
help and `localspec list` answer without importing llama_cpp (its import alone takes a
good part of a second) or numpy; the engine's names load on first use."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

# Runs the real entry point in a fresh interpreter, then reports what it imported.
PROBE = textwrap.dedent("""
    import io, json, sys
    from contextlib import redirect_stdout

    from localspec.cli import main

    out = io.StringIO()
    try:
        with redirect_stdout(out):
            main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("llama_cpp", "textual", "huggingface_hub", "numpy"))
    print(json.dumps({"code": code, "out": out.getvalue(), "loaded": loaded}))
""")


def _probe(tmp_path, *args: str) -> dict:
    env = {**os.environ, "LOCALSPEC_HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [["--help"], ["list"], ["list", "--json"], ["run", "--help"], ["bench", "--help"],
                                  ["serve", "--help"], ["check", "--help"]])
def test_commands_that_run_no_model_load_no_llama_cpp(tmp_path, args):
    got = _probe(tmp_path, *args)
    assert got["code"] == 0, got
    assert got["out"], "the command printed nothing"
    assert not [m for m in got["loaded"] if m.startswith("llama_cpp")], got["loaded"]
    assert not [m for m in got["loaded"] if m.startswith("textual")], got["loaded"]
    assert not [m for m in got["loaded"] if m.startswith("numpy")], got["loaded"]   # ~0.15 s to import


def test_help_lists_every_command(tmp_path):
    out = _probe(tmp_path, "--help")["out"]
    for command in ("run", "chat", "compare", "bench", "tune", "check", "pull", "list", "serve", "info"):
        assert f"  {command} " in out, command


def test_the_engines_names_load_on_first_use():
    code = textwrap.dedent("""
        import sys
        import localspec.engine as engine
        from localspec.engine import DrafterKind, RunSpec, SamplingConfig, Done
        before = "llama_cpp" in sys.modules
        from localspec.engine import Engine
        assert Engine is engine.Engine and Engine.__name__ == "Engine"
        assert sorted(engine.__all__) == sorted(n for n in dir(engine) if n in engine.__all__)
        try:
            engine.NoSuchName
        except AttributeError as exc:
            assert "NoSuchName" in str(exc)
        else:
            raise SystemExit("no AttributeError")
        print(before, "llama_cpp" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True"]


def test_the_lazy_command_table_matches_the_commands():
    """`--help` lists commands from cli.main.COMMANDS without importing them: each entry names
    the module that defines the command, and its text is the command's own first paragraph."""
    import importlib

    cli_main = importlib.import_module("localspec.cli.main")
    cli_main._register()
    assert set(cli_main.COMMANDS) == set(cli_main.cli.commands)
    for name, (module, text) in cli_main.COMMANDS.items():
        cmd = cli_main.cli.commands[name]
        assert cmd.callback.__module__ == f"localspec.cli.{module}", name
        assert cmd.help.strip().split("\n\n")[0].replace("\n", " ").startswith(text), name
