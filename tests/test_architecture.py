"""The package's layers: each imports only from the layers below it, never a private name of
another module; the engine and the chat core know nothing of terminals (no textual); tui/
holds only screens, widgets, workers and styles."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
ENGINE = ROOT / "localspec" / "engine"
UI_FREE = [ENGINE, ROOT / "localspec" / "chat", ROOT / "localspec" / "models", ROOT / "localspec" / "bench"]

# Bottom to top. A module imports from its own package and from lower layers only; the
# modules at localspec's top (errors, paths, the version) are the floor everyone stands on.
LAYERS = {"engine": 1, "models": 2, "chat": 3, "bench": 3, "server": 4, "tui": 5, "cli": 6, "__main__": 7}


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (tui/ ships as localspec.tui)."""
    found = {}
    for base, prefix in ((ROOT / "localspec", ["localspec"]), (ROOT / "tui", ["localspec", "tui"])):
        for path in base.rglob("*.py"):
            parts = prefix + list(path.relative_to(base).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path):
    """(imported module, imported names, line) for every import in a module, at any depth
    (function-level ones too), relative ones resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            yield module, [a.name for a in node.names], node.lineno


def _layer(module: str) -> tuple[str, int] | None:
    parts = module.split(".")
    if parts[0] != "localspec":
        return None
    top = parts[1] if len(parts) > 1 else ""
    return top, LAYERS.get(top, 0)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_each_layer_imports_only_from_below():
    modules = _modules()
    offenders = []
    for name, path in sorted(modules.items()):
        own, rank = _layer(name)
        for module, names, line in _imports(name, path):
            target = _layer(module)
            if target is None:
                continue
            for imported in names or [""]:
                full = f"{module}.{imported}" if f"{module}.{imported}" in modules else module
                top, other = _layer(full)
                if top != own and other >= rank and other > 0:
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: {own} imports {full}")
    assert not offenders, "\n".join(offenders)


def test_no_module_imports_another_modules_private_names():
    modules = _modules()
    offenders = []
    for name, path in sorted(modules.items()):
        for module, names, line in _imports(name, path):
            if module in modules and module != name:
                offenders += [f"{path.relative_to(ROOT)}:{line}: {module}.{n}" for n in names if _private(n)]
            if module.startswith("localspec.") and any(_private(part) for part in module.split(".")):
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("source,expected", [
    ("from ..models.compat import check_files\n", "engine imports localspec.models.compat"),
    ("def f():\n    from localspec.chat import session\n", "engine imports localspec.chat.session"),
    ("import localspec.cli.main\n", "engine imports localspec.cli.main"),
])
def test_the_layer_check_sees_every_kind_of_import(tmp_path, monkeypatch, source, expected):
    fake = tmp_path / "engine" / "probe.py"
    fake.parent.mkdir()
    fake.write_text(source)
    modules = dict(_modules(), **{"localspec.engine.probe": fake})
    monkeypatch.setattr(sys.modules[__name__], "_modules", lambda: modules)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match=expected.replace(".", r"\.")):
        test_each_layer_imports_only_from_below()


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
    code = ("import sys, localspec.engine, localspec.engine.engine, localspec.engine.compat, "
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


def test_the_policy_package_is_small_modules():
    """Every module of the adaptive policy stays at 400 lines or fewer (issue 38's limit)."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "localspec" / "engine" / "policy").glob("*.py")}
    assert max(sizes.values()) <= 400, sizes
