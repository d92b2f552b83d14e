"""The project's own documentation stands alone and is current.

- docs/api.md is what `python docs/make_api.py` writes from today's docstrings (`--check`);
- nothing a user reads — README.md, docs/, the packages' docstrings and --help texts — points to a path outside the
  repository (the internal notes `shared/`, `../shared`, `spec/`);
- README.md is a landing page of at most 200 lines.
"""
from __future__ import annotations

import re
import subprocess
import sys


from conftest import ROOT  # noqa: E402

USER_FACING = ["README.md", "docs", "l2e", "tasks", "meta_train", "evaluate"]
OUTSIDE = re.compile(r"shared/spec|\.\./shared|shared/data|shared/seeds")


def test_api_reference_is_current():
    proc = subprocess.run([sys.executable, "docs/make_api.py", "--check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_nothing_user_facing_points_outside_the_repository():
    bad = []
    for entry in USER_FACING:
        path = ROOT / entry
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.suffix in (".py", ".md")]
        for f in files:
            for i, line in enumerate(f.read_text().splitlines(), 1):
                if OUTSIDE.search(line):
                    bad.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()[:100]}")
    assert not bad, "\n".join(bad)


def test_readme_is_a_landing_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
