"""The layout's promises, checked: the GUI loads no torch, the core depends on nothing else, no import cycles,
every import goes down the floors (docs/architecture.md, "Floors"), model families and test hooks stay in their
own folders."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from trainers.core.registry import FAMILIES, FAMILY_NAMES, METHOD_NAMES, METHODS

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "diffusers", "accelerate", "transformers", "safetensors", "bitsandbytes")
# The packages bottom to top (docs/architecture.md, "Floors"): a module imports only its own package and packages on
# lower floors; packages on one floor do not import each other. A package is trainers/<name> (a folder or a single
# module), or gui; `trainers` is the package's own __init__.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("core", "trainers"),
    ("data",),
    ("models",),
    ("adapters", "memory_estimate", "sampling"),
    ("quant",),
    ("train",),
    ("methods",),
    ("preflight", "loras"),
    ("generate", "dataset_edit"),
    ("tools", "caption"),
    ("health", "scores"),
    ("cluster", "demo_shapes"),
    ("demo_pretrain",),
    ("demo", "config_report"),
    ("__main__",),
    ("gui",),
)
# Upward imports not yet removed, (importer, imported) module pairs, each with the issue that removes it.
KNOWN_BREAKS: frozenset[tuple[str, str]] = frozenset()


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted([*REPO.glob("trainers/**/*.py"), *REPO.glob("gui/*.py")]):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules that `path` imports anywhere (inside functions and TYPE_CHECKING blocks too)."""
    def ours(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            target = ours(name)
            if target:
                found.add(target)
                break
    return found


@pytest.mark.slow  # a fresh interpreter: this process has torch loaded already
def test_importing_the_gui_loads_no_torch_or_model_library() -> None:
    code = "import sys, app, gui.page; print(sorted(m for m in sys.modules if m.split('.')[0] in %r))" % (HEAVY,)
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]", f"the GUI imported {result.stdout.strip()}"


def test_core_imports_nothing_outside_itself() -> None:
    modules = _modules()
    outside = {name: sorted(t for t in _imports(path, modules) if not t.startswith("trainers.core"))
               for name, path in modules.items() if name.startswith("trainers.core")}
    assert not {k: v for k, v in outside.items() if v}
    heavy = [name for name, path in modules.items() if name.startswith("trainers.core")
             and re.search(r"^\s*(import|from) (%s)\b" % "|".join(HEAVY), path.read_text(), re.MULTILINE)]
    assert not heavy, f"torch-free core modules import a model library: {heavy}"


def test_there_are_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(target):] + [target]))
            if target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def package_of(module: str) -> str:
    """trainers.train.loop -> train, trainers.demo -> demo, gui.page -> gui, trainers -> trainers."""
    parts = module.split(".")
    return parts[0] if parts[0] != "trainers" or len(parts) == 1 else parts[1]


def floor_breaks(graph: Mapping[str, set[str]], floors: tuple[tuple[str, ...], ...] = FLOORS) -> list[str]:
    """Every import of `graph` (module -> the modules it imports) that does not go down the floors, and every
    package on no floor."""
    level = {package: i for i, floor in enumerate(floors) for package in floor}
    found = []
    for name in sorted(graph):
        here = package_of(name)
        if here not in level:
            found.append(f"{name}: package {here!r} is on no floor (add it to FLOORS and docs/architecture.md)")
            continue
        for target in sorted(graph[name]):
            there = package_of(target)
            if there != here and there in level and level[there] >= level[here]:
                side = "the same floor as" if level[there] == level[here] else "a floor above"
                found.append(f"{name} imports {target}: {there} is on {side} {here}")
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def test_every_import_goes_down_the_floors() -> None:
    graph = {name: {t for t in targets if (name, t) not in KNOWN_BREAKS} for name, targets in _graph().items()}
    breaks = floor_breaks(graph)
    assert not breaks, "\n".join(breaks)
    gone = sorted(pair for pair in KNOWN_BREAKS if pair[1] not in _graph().get(pair[0], set()))
    assert not gone, f"no longer imported: remove from KNOWN_BREAKS: {gone}"


def test_an_upward_import_anywhere_in_a_module_breaks_the_floors(tmp_path: Path) -> None:
    """Planted: a data module importing train inside a function and methods under TYPE_CHECKING is caught twice; so
    are an import across one floor and a package on none, while imports down and within a package pass."""
    planted = tmp_path / "trainers" / "data" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("from typing import TYPE_CHECKING\n"
                       "from trainers.core.errors import BadInput\n"
                       "if TYPE_CHECKING:\n    from trainers.methods import rules_for\n"
                       "def later():\n    from trainers.train.loop import train\n", encoding="utf-8")
    modules = {**_modules(), "trainers.data.planted": planted}
    graph = {"trainers.data.planted": _imports(planted, modules) - {"trainers.data.planted"}}
    assert graph["trainers.data.planted"] == {"trainers.core.errors", "trainers.methods", "trainers.train.loop"}
    breaks = floor_breaks(graph)
    assert len(breaks) == 2 and all("a floor above data" in b for b in breaks), breaks
    assert floor_breaks({"trainers.generate.x": {"trainers.dataset_edit.y"}}) == [
        "trainers.generate.x imports trainers.dataset_edit.y: dataset_edit is on the same floor as generate"]
    assert floor_breaks({"trainers.newpkg.x": set()})[0].startswith("trainers.newpkg.x: package 'newpkg' is on no")
    assert floor_breaks({"trainers.train.x": {"trainers.models.y", "trainers.train.z"}, "gui.page": {"trainers"}}) == []


def test_generic_code_never_names_a_model_family() -> None:
    """Adding a family is its folder plus one registry line: nothing else may test for a family by name."""
    own = {spec.package.replace(".", "/") for spec in FAMILIES}
    allowed = {"trainers/core/registry.py",  # the registry itself
               "trainers/demo.py"}  # the demo picks the tiny models it builds
    own.add("trainers/adapters")  # other tools' configs name the families those tools train (sd-scripts' --sdxl)
    # a method's declarations: the sd-scripts script that trains it for each family (SD_SCRIPTS)
    allowed |= {f"{spec.package.replace('.', '/')}/options.py" for spec in METHODS}
    quoted = re.compile(r"""["'](%s)["']""" % "|".join(map(re.escape, FAMILY_NAMES)))
    offenders = []
    for path in [*REPO.glob("trainers/**/*.py"), *REPO.glob("gui/*.py"), REPO / "app.py"]:
        rel = path.relative_to(REPO).as_posix()
        if rel in allowed or any(rel.startswith(folder + "/") for folder in own):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if quoted.search(line) or re.search(r"family\.name\s*[!=]=", line):
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_tabs_and_subcommands_come_from_the_method_registry() -> None:
    from trainers.__main__ import _parser

    commands = _parser()._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them here
    assert [name for name in commands if name in METHOD_NAMES] == list(METHOD_NAMES)
    import gui.page

    source = Path(gui.page.__file__).read_text(encoding="utf-8")
    assert "for i, method in enumerate(METHODS)" in source and not re.search(r"""["']dreambooth["']""", source)
    assert {"network", "full"} <= {m.trains for m in METHODS}


def test_production_code_carries_no_test_hooks() -> None:
    hooks = [f"{p.relative_to(REPO)}:{n}" for p in REPO.glob("trainers/**/*.py")
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"ATELIER_(TEST|FAIL|COUNT)", line)]
    assert not hooks, hooks
