"""The engine and the chat core know nothing of terminals: they must never import textual;
tui/ holds only screens, widgets, workers and styles."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
ENGINE = ROOT / "localspec" / "engine"
UI_FREE = [ENGINE, ROOT / "localspec" / "chat", ROOT / "localspec" / "models", ROOT / "localspec" / "bench"]


def test_engine_and_core_sources_do_not_import_textual_or_rich():
    offenders = []
    for path in (p for folder in UI_FREE for p in folder.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.ImportFrom) and node.level > 0 and node.module:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in ("textual", "rich", "tui") or n.startswith("localspec.tui"):
                    offenders.append(f"{path.name}: {n}")
    assert not offenders, offenders


def test_importing_the_engine_loads_no_textual():
    code = ("import sys, localspec.engine, localspec.engine.engine, localspec.models.compat, "
            "localspec.chat.session, localspec.chat.live, localspec.chat.comparison, localspec.chat.settings; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_tui_ships_inside_the_package():
    import tomllib

    cfg = tomllib.loads((ENGINE.parent.parent / "pyproject.toml").read_text())
    assert cfg["tool"]["setuptools"]["package-dir"]["localspec.tui"] == "tui"
    assert "tui" not in cfg["tool"]["setuptools"]["packages"]


def test_tui_holds_only_screens_widgets_workers_and_styles():
    allowed = {"__init__.py", "app.py", "worker.py", "messages.py", "compositor.py", "format.py"}
    tui = ROOT / "tui"
    loose = sorted(p.name for p in tui.glob("*.py") if p.name not in allowed)
    assert not loose, f"UI-free modules belong in localspec/chat: {loose}"
    assert {p.name for p in tui.iterdir() if p.is_dir() and p.name != "__pycache__"} == {"screens", "widgets"}


def test_run_settings_are_validated_by_runspec_alone():
    """No front end re-checks a run setting's range: click options carry plain types."""
    import importlib

    import click

    cli_main = importlib.import_module("localspec.cli.main")

    cli_main._register()
    ranged = []
    for name, cmd in cli_main.cli.commands.items():
        for p in cmd.params:
            if p.name in ("temp", "top_k", "top_p", "min_p", "seed", "draft_temp", "draft_max", "draft_min",
                          "p_min", "max_tokens") and isinstance(p.type, (click.IntRange, click.FloatRange)):
                ranged.append(f"{name} {p.name}")
    assert not ranged, ranged
