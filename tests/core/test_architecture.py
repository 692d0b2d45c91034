"""The layout's promises, checked: the GUI loads no torch, the core depends on nothing else, no import cycles,
model families and test hooks stay in their own folders."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from trainers.core.registry import FAMILIES, FAMILY_NAMES, METHOD_NAMES, METHODS

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "diffusers", "accelerate", "transformers", "safetensors", "bitsandbytes")


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
