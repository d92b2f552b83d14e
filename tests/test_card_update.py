"""`python -m evaluate card --methods A,B [--update]`: only the named samplers run; --update merges their rows into
the card already in --output (evaluate.card.update), every other row kept unchanged."""
from __future__ import annotations

import json

import pytest

from conftest import one_error_line, run_cli
from evaluate.card.update import merge, parse_methods

TINY = ("--set", "num_steps=300", "--set", "burn_in=100", "--set", "num_chains=2", "--set", "band_seeds=1")


def _row(target, sampler, v):
    return {"target": target, "sampler": sampler, "var_ratio_median": v}


def test_merge_replaces_the_named_samplers_rows_in_place_and_keeps_the_rest():
    old = {"config": {"a": 1}, "rows": [_row("t1", "x", 1), _row("t1", "y", 2), _row("t1", "z", 3),
                                          _row("t2", "x", 4), _row("t2", "y", 5), _row("t2", "z", 6)],
           "band": {"t1": [0, 1], "t2": [0, 2]}, "notes": ["old note"]}
    new = {"config": {"a": 1}, "rows": [_row("t1", "y", 20), _row("t2", "y", 50), _row("t1", "w", 7)],
           "band": {"t1": [0, 1], "t2": [0, 2]}, "notes": []}
    out = merge(old, new, ("y", "w"))
    assert [(r["target"], r["sampler"], r["var_ratio_median"]) for r in out["rows"]] == [
        ("t1", "x", 1), ("t1", "y", 20), ("t1", "z", 3), ("t1", "w", 7),
        ("t2", "x", 4), ("t2", "y", 50), ("t2", "z", 6)]
    assert out["notes"] == ["old note"] and old["rows"][1]["var_ratio_median"] == 2


def test_merge_of_an_analytic_benchmark_replaces_grids_best_points_and_skip_notes():
    old = {"config": {}, "step_sizes": {"x": [1], "e": [2]}, "skipped": {"e": "an ensemble"},
           "rows": [_row("g", "x", 1)], "best": [_row("g", "x", 1)]}
    new = {"config": {}, "step_sizes": {"e": [3]}, "skipped": {}, "rows": [_row("g", "e", 9)],
           "best": [_row("g", "e", 9)]}
    out = merge(old, new, ("e",))
    assert out["step_sizes"] == {"x": [1], "e": [3]} and out["skipped"] == {}
    assert [r["sampler"] for r in out["best"]] == ["x", "e"]


@pytest.mark.parametrize("text", ["", "a,,b", "a,a"])
def test_a_bad_methods_list_is_refused(text):
    from base.io import ConfigError

    with pytest.raises(ConfigError, match="--methods"):
        parse_methods(text)


def test_methods_and_update_refuse_bad_requests_before_writing(tmp_path):
    out = tmp_path / "card"
    line = one_error_line(run_cli("evaluate", "card", "--quiet", "--output", out, "--methods", "sghmc,nope"))
    assert "'nope'" in line and "sghmc" in line and not out.exists()
    line = one_error_line(run_cli("evaluate", "card", "--quiet", "--output", out, "--update"))
    assert "--update needs --methods" in line and not out.exists()
    line = one_error_line(run_cli("evaluate", "card", "--quiet", "--output", out, "--update", "--methods", "sgld"))
    assert "no card.json" in line and not out.exists()


@pytest.mark.slow
def test_update_merges_new_rows_into_an_existing_card(tmp_path, monkeypatch):
    """A two-sampler card, then --methods sgld --update: sghmc's rows unchanged, sgld's added after them on every
    target; a different --set is refused with the card unchanged; the card merged into is the one read under the
    output lock (a writer that changed it just before the lock was taken is not overwritten)."""
    out = tmp_path / "card"
    assert run_cli("evaluate", "card", "--quiet", "--output", out, "--methods", "sghmc,psgld", *TINY).returncode == 0
    first = json.loads((out / "card.json").read_text())
    assert {r["sampler"] for r in first["rows"]} == {"sghmc", "psgld"}
    res = run_cli("evaluate", "card", "--quiet", "--output", out, "--methods", "sgld", "--update", *TINY)
    assert res.returncode == 0, res.stderr[-2000:]
    card = json.loads((out / "card.json").read_text())
    targets = list(dict.fromkeys(r["target"] for r in first["rows"]))
    assert [(r["target"], r["sampler"]) for r in card["rows"]] == [(t, s) for t in targets
                                                                   for s in ("sghmc", "psgld", "sgld")]
    assert [r for r in card["rows"] if r["sampler"] != "sgld"] == first["rows"]
    assert "sgld" in (out / "card.md").read_text()
    before = (out / "card.json").read_bytes()
    line = one_error_line(run_cli("evaluate", "card", "--quiet", "--output", out, "--methods", "sgld", "--update",
                                  *TINY[:-2], "--set", "band_seeds=2"))
    assert "band_seeds" in line and (out / "card.json").read_bytes() == before

    import cli

    class WriterFirst(cli.OutputLock):  # another writer changes the card just before this run takes the lock
        def __init__(self, path, error):
            card = json.loads((out / "card.json").read_text())
            card["notes"] = ["written by another run"]
            (out / "card.json").write_text(json.dumps(card))
            super().__init__(path, error)

    monkeypatch.setattr(cli, "OutputLock", WriterFirst)
    res = run_cli("evaluate", "card", "--quiet", "--output", out, "--methods", "psgld", "--update", *TINY)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((out / "card.json").read_text())["notes"] == ["written by another run"]
