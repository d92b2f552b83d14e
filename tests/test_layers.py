"""The package's layers (ARCHITECTURE.md): l2e ← tasks ← meta_train / evaluate ← bench, and size limits.

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

PACKAGES = ("l2e", "tasks", "meta_train", "evaluate", "bench")
FORBIDDEN = {  # package -> packages of ours it must never import
    "l2e": {"tasks", "meta_train", "evaluate", "bench"},
    "tasks": {"meta_train", "evaluate", "bench"},
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


@pytest.mark.parametrize("package", ("l2e", "tasks", "meta_train", "evaluate"))
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
