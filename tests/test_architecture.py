"""The engine knows nothing of terminals: it must never import textual."""

import ast
import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).parent.parent / "localspec" / "engine"


def test_engine_sources_do_not_import_textual_or_rich():
    offenders = []
    for path in ENGINE.rglob("*.py"):
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
    code = ("import sys, localspec.engine, localspec.engine.session, localspec.compat; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_tui_ships_inside_the_package():
    import tomllib

    cfg = tomllib.loads((ENGINE.parent.parent / "pyproject.toml").read_text())
    assert cfg["tool"]["setuptools"]["package-dir"]["localspec.tui"] == "tui"
    assert "tui" not in cfg["tool"]["setuptools"]["packages"]
