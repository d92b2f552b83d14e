"""The package's layers (docs/decisions.md): base ← l2e ← tasks ← cli ← meta_train / evaluate ← bench, no import cycles, size limits.

Imports are read from the source (every `import` / `from … import`, including those inside functions), so a
lazy import across or up the layers fails here too.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGES = ("base", "l2e", "tasks", "cli", "meta_train", "evaluate", "bench")
FORBIDDEN = {  # package -> packages of ours it must never import
    "base": {"l2e", "tasks", "cli", "meta_train", "evaluate", "bench"},
    "l2e": {"tasks", "cli", "meta_train", "evaluate", "bench"},
    "tasks": {"cli", "meta_train", "evaluate", "bench"},
    "cli": {"tasks", "meta_train", "evaluate", "bench"},
    "meta_train": {"evaluate", "bench"},
    "evaluate": {"meta_train", "bench"},
    "bench": set(),
}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules(package: str):
    return sorted((ROOT / package).rglob("*.py"))


def _imported(path: Path) -> set[str]:
    """Fully qualified module names imported anywhere in `path`."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_across_or_up_the_layers(package):
    bad = []
    for path in _modules(package):
        for name in _imported(path):
            if name.split(".")[0] in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_classification_and_regression_tasks_do_not_import_each_other():
    task, regression = ROOT / "tasks" / "task.py", ROOT / "tasks" / "regression.py"
    assert not any(n.startswith("tasks.regression") for n in _imported(task))
    assert not any(n.startswith("tasks.task") for n in _imported(regression))


def test_importing_evaluate_does_not_load_meta_train():
    code = ("import sys, evaluate, evaluate.run, evaluate.config, evaluate.__main__; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('meta_train', 'bench')); "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_importing_tasks_does_not_load_evaluate():
    code = ("import sys, tasks, tasks.task, tasks.regression; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('evaluate', 'meta_train', 'bench')); "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _function_lengths(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


@pytest.mark.parametrize("package", ("l2e", "tasks", "cli", "meta_train", "evaluate"))
def test_library_size_limits(package):
    """No library module over 400 lines, no function over 60 (docstring included)."""
    bad = []
    for path in _modules(package):
        n = len(path.read_text().splitlines())
        if n > MAX_MODULE_LINES:
            bad.append(f"{path.relative_to(ROOT)}: {n} lines")
        for name, line, length in _function_lengths(path):
            if length > MAX_FUNCTION_LINES:
                bad.append(f"{path.relative_to(ROOT)}:{line} {name}: {length} lines")
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------------------- the module import graph


def _module_names() -> dict[str, Path]:
    """Dotted module name -> file, for every module of our packages (and checkpoints)."""
    out = {}
    for package in PACKAGES + ("checkpoints",):
        for path in _modules(package):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _resolve(name: str, modules: dict) -> str | None:
    """The module of ours that importing `name` loads last (name itself, or its longest module prefix)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports anywhere (top level or inside functions; relative imports
    resolved; `from pkg import sub` counts as importing pkg.sub when that is a module, else pkg)."""
    modules = _module_names()
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(_resolve(a.name, modules) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                for a in node.names:
                    full = f"{base}.{a.name}"
                    deps.add(full if full in modules else _resolve(base, modules))
        graph[name] = deps - {None, name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as one cycle through it."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_cycle_through(graph, component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One import cycle a → … → a inside a strongly connected component (breadth-first from its first module)."""
    start = min(component)
    parent, queue = {start: None}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if w not in parent:
                parent[w] = v
                queue.append(w)
    return sorted(component)


def test_no_import_cycles():
    """No module of ours imports (directly or through others) a module that imports it back, even lazily."""
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_cycle_finder_reports_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_checkpoints_hold_data_only():
    """checkpoints/ ships in the wheel as data and provenance: its only Python file is the package marker, which
    imports nothing of ours (scripts that made its files live in bench/)."""
    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "checkpoints").rglob("*.py"))
    assert files == ["checkpoints/__init__.py"], files
    ours = {n for n in _imported(ROOT / "checkpoints" / "__init__.py") if n.split(".")[0] in PACKAGES}
    assert not ours, ours
