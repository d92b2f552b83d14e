"""Drift guards: every name a registry holds is documented where a user looks for it, read from the registries
themselves (no hand-kept list to fall behind).

- samplers (`l2e.HAND_DESIGNED`, `l2e.LEARNED`, `l2e.FULL_BATCH`) and learned kinds: docs/samplers.md;
- evaluation methods (`evaluate.methods.registry.METHODS`) and evaluation presets: docs/evaluation.md;
- meta-training presets, estimators and objectives: docs/meta_training.md, and README lists every estimator and
  objective it names;
- shipped checkpoints (`l2e.checkpoint.SHIPPED`): README and docs/samplers.md.
A name counts as documented when it appears as inline code (`name`, or `name` inside a longer code span such as
`es.estimator=a|b`), so prose that happens to contain the word does not.
"""
from __future__ import annotations

import re

import pytest

from conftest import ROOT


def _code_tokens(path) -> set[str]:
    """Every identifier-like token inside the file's inline code spans and fenced code blocks."""
    text = (ROOT / path).read_text()
    spans = re.findall(r"```.*?```", text, flags=re.S) + re.findall(r"`([^`\n]+)`", text)
    tokens = {tok for span in spans for tok in re.findall(r"[A-Za-z0-9_.\-]+", span)}
    return tokens | {part for tok in tokens for part in tok.split(".")} | set(spans)  # l2e.sgld -> sgld too


def _missing(names, path) -> list[str]:
    tokens = _code_tokens(path)
    return [n for n in names if n not in tokens]


def _registries() -> dict[str, tuple[list[str], tuple[str, ...]]]:
    import l2e
    from evaluate.config import PRESETS as EVAL_PRESETS
    from evaluate.methods.registry import METHODS
    from l2e.checkpoint import SHIPPED
    from meta_train.estimators import ESTIMATORS
    from meta_train.objectives import OBJECTIVES
    from meta_train.presets import PRESETS as META_PRESETS

    return {
        "samplers": (list(l2e.HAND_DESIGNED + l2e.LEARNED + l2e.FULL_BATCH), ("docs/samplers.md",)),
        "learned kinds": (list(l2e.learned.REGISTRY), ("docs/samplers.md",)),
        "evaluation methods": (list(METHODS), ("docs/evaluation.md",)),
        "evaluation presets": (list(EVAL_PRESETS), ("docs/evaluation.md",)),
        "meta-training presets": (list(META_PRESETS), ("docs/meta_training.md",)),
        "estimators": (list(ESTIMATORS), ("docs/meta_training.md", "README.md")),
        "objectives": (list(OBJECTIVES), ("docs/meta_training.md", "README.md")),
        "shipped checkpoints": (list(SHIPPED), ("docs/samplers.md", "README.md")),
    }


@pytest.mark.parametrize("registry", ["samplers", "learned kinds", "evaluation methods", "evaluation presets",
                                      "meta-training presets", "estimators", "objectives", "shipped checkpoints"])
def test_every_registry_name_is_documented(registry):
    names, pages = _registries()[registry]
    assert names, registry
    bad = {page: _missing(names, page) for page in pages}
    assert not any(bad.values()), f"{registry} not documented: {bad}"


def test_the_guard_can_fail(tmp_path):
    """A name absent from a page's code spans is reported (the guard is not vacuous)."""
    page = tmp_path / "page.md"
    page.write_text("We ship `sghmc` and `mass`; sgld is mentioned only in prose.\n")
    assert _missing(["sghmc", "mass", "sgld"], page) == ["sgld"]
