"""Issue 40, class 2: every file the budget curves, the references, the merges and the window selection read is checked
against a schema before anything runs (tasks.reference.schema, evaluate.curve.schema, bench.select_window).

- draw_probs.npz (`tasks.reference.load_draws`), one case per way it can be wrong — zip integrity (truncated, empty,
  not a zip, a FIFO), its members (unexpected, repeated, missing, object / wrong dtypes, wrong dimensions), draw
  counts bounded from the header before anything is allocated (a forged header declaring 10⁹ draws is refused with
  < 1 MiB allocated by the archive reader), shapes against the reference (classes, test rows without `rows`, rows
  negative, out of range, not increasing or of another count — the cases of the former
  test_hmc_reference.test_draw_rows_are_checked —, chain indices), probability ranges and row sums, non-finite
  values, a single draw, every draw the same, more draws than the chains kept, and the row order against the
  reference's own probs.txt (rows shifted by one, a permutation) — is one ReferenceDataError naming the file; the
  committed references' draws are all accepted, unchanged;
- predictive.npz (regression) the same way, read by the evaluation and by `load_draws`; `evaluate reference` refuses
  to keep more draws than are read (--keep-draws 4097);
- the float16 rounding the row-sum tolerance is derived from (2**-11 of a row's sum) holds on random rows;
- `evaluate curve` with a bad draw file: exit 2, one `error:` line naming the file, --output never created and no
  curve task started; a reference keeping no more draws than K is refused the same way;
- `evaluate curve --merge`: a part whose points hold a string, a missing field, seeds that are not the run's, a
  point per budget missing — one error line naming the file and the field, nothing written; a merge keeps every
  part's "not on the curves" notes, in curve.json and curve.md;
- `python -m bench.select_window`: under the CLI guard, every bad input (truncated, deeply nested or non-curve JSON,
  no task, a directory or a missing folder as --json, the same fraction twice, no such method) is exit 2 with one
  `error:` line and nothing written; a good run writes its choice.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from conftest import DATA_DIR, ROOT, run_cli
from test_fuzz import snapshot

REFS = ROOT / "results" / "references"
WINE = "wine/mlp-16"
POWER = "uci:power-plant[mile-s1]/mlp-linear"


def reference_copy(dst: Path, *names: str) -> Path:
    """A reference directory holding the committed references of `names` (their index entries and folders)."""
    index = json.loads((REFS / "reference.json").read_text())
    dst.mkdir(parents=True)
    for name in names:
        shutil.copytree(REFS / index[name]["dir"], dst / index[name]["dir"])
    (dst / "reference.json").write_text(json.dumps({n: index[n] for n in names}, indent=1))
    return dst


def _good(name: str = "wine_mlp-16") -> dict:
    with np.load(REFS / name / "draw_probs.npz") as z:
        return {k: z[k] for k in z.files}


def _npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _forged(shape: tuple) -> bytes:
    """A .npz whose 'probs' header declares `shape` (float16) over a few bytes of data, and a good 'chain'."""
    import zipfile

    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f2", "fortran_order": False, "shape": shape})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("probs.npy", head.getvalue() + b"\0" * 64)
        zf.writestr("chain.npy", _npy(np.zeros(shape[0] if shape[0] < 10 else 4, np.int16)))
    return out.getvalue()


def _repeated(**arrays) -> bytes:
    """A .npz holding `arrays` and a second member named like the first."""
    import warnings
    import zipfile

    out = io.BytesIO(_npz_bytes(**arrays))
    with warnings.catch_warnings(), zipfile.ZipFile(out, "a") as zf:
        warnings.simplefilter("ignore", UserWarning)  # zipfile warns of the duplicate name it is asked to write
        first = next(iter(arrays))
        zf.writestr(f"{first}.npy", _npy(arrays[first]))
    return out.getvalue()


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _bad_draws() -> dict:
    """{case: (file bytes or None for a FIFO, phrase of the one-line refusal)} for the wine reference (36 rows, 3
    classes, 4 chains, 400 draws)."""
    g = _good()
    p, chain = g["probs"], g["chain"]
    raw = _npz_bytes(**g)
    neg = p.astype(np.float32).copy()
    neg[3, 5] = [-0.25, 0.5, 0.75]
    off = p.astype(np.float32).copy()
    off[7, 2] = [0.5, 0.5, 0.5]
    nan = p.astype(np.float32).copy()
    nan[1, 1, 1] = np.nan
    return {
        "truncated": (raw[: len(raw) // 2], "not a readable .npz archive"),
        "empty": (b"", "not a readable .npz archive"),
        "not a zip": (b"probs = 0.5\n" * 20, "not a readable .npz archive"),
        "a fifo": (None, "not a regular file"),
        "unexpected member": (_npz_bytes(**g, weights=np.zeros(3)), "unexpected member 'weights.npy'"),
        "repeated member": (_repeated(**g), "a second member 'probs.npy'"),
        "missing chain": (_npz_bytes(probs=p), "no array 'chain'"),
        "object chain": (_npz_bytes(probs=p, chain=np.array([None] * len(p), object)), "dtype object"),
        "float rows": (_npz_bytes(probs=p[:, :4], chain=chain, rows=np.arange(4.0)), "expected integer"),
        "integer probs": (_npz_bytes(probs=p.astype(np.int8), chain=chain), "expected floating-point"),
        "2-D probs": (_npz_bytes(probs=p[:, :, 0], chain=chain), "expected 3 dimensions"),
        "forged 10**9 draws": (_forged((10**9, 36, 3)), "holds more than"),
        "too many draws": (_npz_bytes(probs=np.repeat(p, 11, 0), chain=np.repeat(chain, 11)), "at most 4096"),
        "wrong classes": (_npz_bytes(probs=p[..., :2], chain=chain), "2 classes, the reference's probabilities have 3"),
        "rows missing": (_npz_bytes(probs=p[:, :35], chain=chain), "35 test points and no 'rows'"),
        "rows beyond the test set": (_npz_bytes(probs=p[:, :4], chain=chain, rows=np.array([0, 1, 2, 36])),
                                     "increasing test-point indices in [0, 36)"),
        "negative row": (_npz_bytes(probs=p[:, :4], chain=chain, rows=np.array([-1, 0, 1, 2])),
                         "increasing test-point indices in [0, 36)"),
        "rows not increasing": (_npz_bytes(probs=p[:, :4], chain=chain, rows=np.array([0, 2, 2, 3])),
                                "increasing test-point indices"),
        "rows for another count": (_npz_bytes(probs=p[:, :4], chain=chain, rows=np.arange(5)), "rows must be 4"),
        "chain of another length": (_npz_bytes(probs=p, chain=chain[:-1]), "one chain index per draw (400)"),
        "chain beyond the chains": (_npz_bytes(probs=p, chain=chain + 1), "expected indices in [0, 4)"),
        "negative probability": (_npz_bytes(probs=neg, chain=chain), "outside [0, 1]"),
        "rows not summing to 1": (_npz_bytes(probs=off, chain=chain), "do not sum to 1 (draw 7, row 2"),
        "nan": (_npz_bytes(probs=nan, chain=chain), "non-finite probability"),
        "one draw": (_npz_bytes(probs=p[:1], chain=chain[:1]), "1 draw; "),
        "every draw 1/3": (_npz_bytes(probs=np.full_like(p, 1 / 3), chain=chain), "every draw is the same"),
        "rows shifted by one": (_npz_bytes(probs=p[:, :35], chain=chain, rows=np.arange(1, 36)),
                                "not in the reference's test order"),
        "rows permuted": (_npz_bytes(probs=p[:, np.random.default_rng(3).permutation(36)], chain=chain),
                          "not in the reference's test order"),
        "more draws than the chains kept": (_npz_bytes(probs=np.repeat(p, 2, 0), chain=np.repeat(chain, 2)),
                                            "800 draws, more than the 400"),
    }


BAD_DRAWS = _bad_draws()


def _write(path: Path, data: bytes | None) -> None:
    path.unlink(missing_ok=True)
    if data is None:
        os.mkfifo(path)
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("case", list(BAD_DRAWS))
def test_a_bad_draw_file_is_one_line_naming_it(case, tmp_path):
    from tasks.reference import ReferenceDataError, load_draws

    ref = reference_copy(tmp_path / "ref", WINE)
    data, phrase = BAD_DRAWS[case]
    path = ref / "wine_mlp-16" / "draw_probs.npz"
    _write(path, data)
    with pytest.raises(ReferenceDataError) as e:
        load_draws(ref / "wine_mlp-16", "classification")
    line = str(e.value)
    assert "\n" not in line and "draw_probs.npz" in line and phrase in line, (case, line)
    if case.startswith("forged"):  # refused from the header: the 216 GB of 10**9 draws are never allocated
        from tasks.reference.schema import DRAW_ARRAYS, read_npz

        tracemalloc.start()
        try:
            with pytest.raises(ReferenceDataError, match=phrase):
                read_npz(path, "draws", DRAW_ARRAYS, ("probs", "chain"), ReferenceDataError)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 2**20, peak


def test_the_committed_draws_are_accepted_and_unchanged():
    from tasks.reference import load_draws

    index = json.loads((REFS / "reference.json").read_text())
    seen = 0
    for name, entry in index.items():
        got = load_draws(REFS / entry["dir"], entry["kind"])
        if got is None:
            assert not (REFS / entry["dir"] / "draw_probs.npz").exists()
            continue
        seen += 1
        if entry["kind"] == "classification":
            with np.load(REFS / entry["dir"] / "draw_probs.npz") as z:
                np.testing.assert_array_equal(got["probs"], z["probs"].astype(np.float32))
                assert (got["rows"] is None) == ("rows" not in z.files)
        else:
            assert got["loc"].shape == got["scale"].shape and got["loc"].shape[0] >= 2
    assert seen == len(index) >= 32  # every reference in the index keeps its draws (evaluate.zoo_files)
    assert "mnist/mlp-8-n10000" not in index and (REFS / "not_converged" / "mnist_mlp-8-n10000.json").is_file()


def test_float16_rows_sum_to_one_within_the_derived_bound():
    """draw_probs.npz stores float16: a value ≤ 1 rounds by at most 2**-12 absolute above 0.5 and 2**-11 relative
    below, so a row's sum moves by at most 2**-11 (the reason ROW_SUM_ATOL = 1e-3 holds for these files)."""
    from tasks.reference import ROW_SUM_ATOL

    rng = np.random.default_rng(0)
    for classes in (2, 3, 10, 100):
        for alpha in (0.05, 1.0, 20.0):
            p = rng.dirichlet(np.full(classes, alpha), size=4000)
            dev = np.abs(p.astype(np.float16).astype(np.float64).sum(1) - 1.0).max()
            assert dev <= 2.0**-11 < ROW_SUM_ATOL, (classes, alpha, dev)


def test_reference_keeps_no_more_draws_than_are_read(tmp_path):
    proc = run_cli("evaluate", "reference", "--keep-draws", "4097", "--output", tmp_path / "ref", "--quiet")
    _one_error(proc, "--keep-draws must be at most 4096")
    assert not (tmp_path / "ref").exists()


@pytest.mark.parametrize("case, phrase", [
    ("extra array", "unexpected member 'mean.npy'"), ("test columns", "1914 test columns, expected 1915"),
    ("zero scale", "non-positive scale"), ("identical draws", "every draw is the same"),
    ("shapes differ", "must both be (S, n)"), ("too many draws", "at most 4096"), ("truncated", "not a readable")])
def test_a_bad_predictive_file_is_one_line_naming_it(case, phrase, tmp_path):
    from tasks.reference import ReferenceDataError, load_draws

    ref = reference_copy(tmp_path / "ref", POWER)
    task_dir = ref / "uci_power-plant_mile-s1__mlp-linear"
    with np.load(task_dir / "predictive.npz") as z:
        loc, scale = z["loc"], z["scale"]
    arrays = {"extra array": dict(loc=loc, scale=scale, mean=loc[0]),
              "test columns": dict(loc=loc[:, 1:], scale=scale[:, 1:]),
              "zero scale": dict(loc=loc, scale=np.where(np.arange(loc.shape[1]) == 9, 0.0, scale)),
              "identical draws": dict(loc=np.repeat(loc[:1], 5, 0), scale=np.repeat(scale[:1], 5, 0)),
              "shapes differ": dict(loc=loc, scale=scale[:-1]),
              "too many draws": dict(loc=np.repeat(loc, 21, 0), scale=np.repeat(scale, 21, 0)),
              "truncated": None}[case]
    data = _npz_bytes(**arrays) if arrays is not None else (task_dir / "predictive.npz").read_bytes()[:999]
    (task_dir / "predictive.npz").write_bytes(data)
    with pytest.raises(ReferenceDataError) as e:
        load_draws(task_dir, "regression")
    assert "predictive.npz" in str(e.value) and phrase in str(e.value), str(e.value)
    if case not in ("identical draws", "too many draws") and (DATA_DIR / "uci" / "power-plant").is_dir():
        from evaluate.config import get_preset  # the evaluation's reader refuses the same file
        from tasks import build
        from tasks.reference import load_reference_dir

        cfg = get_preset("references")
        task = build(cfg.tasks[cfg.task_names().index(POWER)])
        with pytest.raises(ReferenceDataError, match=phrase.replace("(", r"\(").replace(")", r"\)")):
            load_reference_dir(ref, POWER, task)


# --------------------------------------------------------------------------- the curve command


def _no_curve_runs(monkeypatch):
    import evaluate.curve.run as curve_run

    def refuse(*a, **k):
        raise AssertionError("a curve task started")

    monkeypatch.setattr(curve_run, "curve_task", refuse)


def _one_error(proc, *phrases) -> str:
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    assert all(p in lines[0] for p in phrases), lines[0]
    return lines[0]


@pytest.mark.parametrize("case", ["rows shifted by one", "every draw 1/3", "wrong classes", "rows missing",
                                  "forged 10**9 draws", "truncated"])
def test_curve_refuses_a_bad_draw_file_before_any_run(case, tmp_path, monkeypatch):
    _no_curve_runs(monkeypatch)
    ref = reference_copy(tmp_path / "ref", WINE)
    _write(ref / "wine_mlp-16" / "draw_probs.npz", BAD_DRAWS[case][0])
    before = snapshot(tmp_path)
    proc = run_cli("evaluate", "curve", "--reference", ref, "--set", "methods=sghmc", "--output", tmp_path / "out",
                   "--quiet")
    _one_error(proc, "draw_probs.npz", BAD_DRAWS[case][1])
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def test_curve_refuses_a_reference_with_no_more_draws_than_k(tmp_path, monkeypatch):
    _no_curve_runs(monkeypatch)
    ref = reference_copy(tmp_path / "ref", WINE)
    g = _good()
    (ref / "wine_mlp-16" / "draw_probs.npz").write_bytes(_npz_bytes(probs=g["probs"][::40], chain=g["chain"][::40]))
    proc = run_cli("evaluate", "curve", "--reference", ref, "--set", "methods=sghmc", "--output", tmp_path / "out")
    _one_error(proc, "keeps 10 draws", "more than K = 10")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- merges


RUN = ROOT / "results" / "curve_window_0.25"


def _split_run(tmp_path: Path) -> tuple[Path, Path]:
    """Two parts of the committed run: a holds l2e_transient (and a note on nuts_bde), b l2e_transient@M=10 (and a
    note on mile)."""
    run = json.loads((RUN / "curve.json").read_text())
    dirs = []
    for name, keep, note in (("a", "l2e_transient", "nuts_bde"), ("b", "l2e_transient@M=10", "mile")):
        part = json.loads(json.dumps(run))
        for task in part["tasks"].values():
            task["methods"] = {keep: task["methods"][keep]}
        part["off_curve"] = {note: f"{note} left out in part {name}"}
        (tmp_path / name).mkdir()
        (tmp_path / name / "curve.json").write_text(json.dumps(part))
        dirs.append(tmp_path / name)
    return dirs[0], dirs[1]


def test_a_merge_keeps_every_parts_notes(tmp_path):
    a, b = _split_run(tmp_path)
    proc = run_cli("evaluate", "curve", "--merge", a, "--merge", b, "--output", tmp_path / "m")
    assert proc.returncode == 0, proc.stderr
    merged = json.loads((tmp_path / "m" / "curve.json").read_text())
    assert merged["off_curve"] == {"nuts_bde": "nuts_bde left out in part a", "mile": "mile left out in part b"}
    assert set(merged["tasks"]["wine/mlp-16"]["methods"]) == {"l2e_transient", "l2e_transient@M=10"}
    md = (tmp_path / "m" / "curve.md").read_text()
    assert "Not on the curves: nuts_bde, nuts_bde left out in part a; mile, mile left out in part b." in md


def _mutated(part: Path, change) -> None:
    run = json.loads((part / "curve.json").read_text())
    change(run)
    (part / "curve.json").write_text(json.dumps(run))


def _first_choice(run: dict) -> dict:
    task = next(iter(run["tasks"].values()))
    return next(iter(task["methods"].values()))["choices"]["oracle"]


@pytest.mark.parametrize("case, change, phrase", [
    ("string point", lambda r: _first_choice(r)["seeds"]["0"][2].update(tv="0.1"),
     "field 'tv' is a string '0.1', expected null or number"),
    ("list point", lambda r: _first_choice(r)["seeds"]["0"][1].update(energy=[1.0]), "field 'energy' is a list"),
    ("missing floors", lambda r: next(iter(r["tasks"].values())).pop("floors"), "no field 'floors'"),
    ("a point short", lambda r: _first_choice(r)["seeds"]["1"].pop(), "holds 5 points, expected 6"),
    ("seeds not the run's", lambda r: _first_choice(r)["seeds"].pop("2"), "holds seeds 0, 1, the run's are 0, 1, 2"),
    ("boolean K", lambda r: r.update(k=True), "field 'k' is a boolean true"),
    ("note not text", lambda r: r.update(off_curve={"mile": 3}), "off_curve.'mile' is a number 3, expected str"),
    ("no task", lambda r: r.update(tasks={}), "no task"),
])
def test_a_merge_refuses_a_part_that_is_not_a_curve_result(case, change, phrase, tmp_path):
    a, b = _split_run(tmp_path)
    _mutated(b, change)
    before = snapshot(tmp_path)
    proc = run_cli("evaluate", "curve", "--merge", a, "--merge", b, "--output", tmp_path / "m")
    _one_error(proc, str(b / "curve.json"), phrase)
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- window selection


def select_window(*argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m bench.select_window argv`, in this process."""
    from bench.select_window import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as e:  # argparse's own exits
            code = e.code
    return code, out.getvalue(), err.getvalue()


def complete_curve(partial: dict) -> dict:
    """A curve result of the schema (evaluate.curve.schema) around a partial one that gives curve.budgets and per task
    per row "chains" and the oracle choice's to_floor per_seed lists: every other field filled in (K = 10, seeds
    0 … S−1 for S per-seed values, one point per budget, floors of 0.1)."""
    budgets = partial["curve"]["budgets"]
    out = {"k": 10, "methods": [], "tasks": {}}
    for name, task in partial["tasks"].items():
        q = {"median": 0.1, "q10": 0.09, "q90": 0.11}
        rows = {}
        for row_name, row in task["methods"].items():
            choice = row["choices"]["oracle"]
            per_seed = next(iter(choice["to_floor"].values()))["per_seed"]
            seeds = len(per_seed)
            point = {"budget": 0, "gradients": 1.0, "seconds": 0.1, "divergent_chains": 0, "tv": 0.2, "energy": 0.2,
                     "agreement": 0.9, "t_kin": 1.0, "ratios": {"weight_norm": 1.0}}
            to_floor = {m: {"per_seed": v["per_seed"], "reached": sum(g is not None for g in v["per_seed"]),
                            "seeds": seeds, "mean": None, "se": None} for m, v in choice["to_floor"].items()}
            rows[row_name] = {"method": row_name.split("@")[0], "chains": row["chains"],
                              "tuning": {"gradients": 0, "grid": [], "validation": {}, "oracle": {}},
                              "choices": {"oracle": {"hp": {}, "to_floor": to_floor, "seeds": {
                                  str(s): [{**point, "budget": g} for g in budgets] for s in range(seeds)}}}}
            out["methods"] = list(dict.fromkeys([*out["methods"], row_name.split("@")[0]]))
        floors = {"tv": q, "energy": q, "k": 10, "resamples": 200, "draws": 400}
        out["tasks"][name] = {"floors": floors, "methods": rows}
    out["curve"] = {"budgets": list(budgets), "chains": sorted({r["chains"] for t in out["tasks"].values()
                                                                for r in t["methods"].values()}),
                    "seeds": list(range(seeds)), "tune_budget": 2000, "tune_seed": 0}
    return out


def test_complete_curve_is_a_curve_result():
    from evaluate.curve.schema import check_curve_result

    partial = {"curve": {"budgets": [250, 8000]}, "tasks": {"t": {"methods": {"m": {"chains": 1, "choices": {
        "oracle": {"to_floor": {"tv": {"per_seed": [1000, None]}, "energy": {"per_seed": [500, 400]}}}}}}}}}
    result = complete_curve(partial)
    assert check_curve_result(result, "x") is result and result["curve"]["seeds"] == [0, 1]


def _bad_run(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "bad"
    d.mkdir()
    (d / "curve.json").write_text(text)
    return d


@pytest.mark.parametrize("case", ["truncated", "deep", "not a curve", "no task", "directory as --json",
                                  "missing folder for --json", "same fraction twice", "no such method",
                                  "no curve.json", "bad fraction"])
def test_select_window_bad_input_is_one_error_line(case, tmp_path):
    run = json.loads((RUN / "curve.json").read_text())
    text = {"truncated": (RUN / "curve.json").read_text()[:5000], "deep": "[" * 100_000 + "]" * 100_000,
            "not a curve": json.dumps({"k": 10}), "no task": json.dumps({**run, "tasks": {}})}.get(case)
    args = ["--run", f"0.25={_bad_run(tmp_path, text) if text else RUN}", "--json", tmp_path / "out.json"]
    args = {"directory as --json": ["--run", f"0.25={RUN}", "--json", tmp_path],
            "missing folder for --json": ["--run", f"0.25={RUN}", "--json", tmp_path / "no" / "out.json"],
            "same fraction twice": ["--run", f"0.25={RUN}", "--run", f"0.250={RUN}", "--json", tmp_path / "o.json"],
            "no such method": ["--run", f"0.25={RUN}", "--method", "sghmc"],
            "no curve.json": ["--run", f"0.25={tmp_path}"], "bad fraction": ["--run", f"1.5={RUN}"]}.get(case, args)
    before = snapshot(tmp_path)
    code, out, err = select_window(*args)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and out == "", (case, code, err)
    assert "Traceback" not in err and snapshot(tmp_path) == before
    expected = {"truncated": "is not valid JSON", "deep": "nested more than", "not a curve": "no field 'curve'",
                "no task": "no task", "directory as --json": "a directory", "missing folder for --json": "no directory",
                "same fraction twice": "given twice", "no such method": "no run holds method 'sghmc'",
                "no curve.json": "not found", "bad fraction": "0 < FRACTION < 1"}[case]
    assert expected in lines[0], lines[0]


def test_select_window_scores_the_committed_runs(tmp_path):
    code, out, err = select_window("--run", f"0.25={RUN}", "--run", f"0.75={ROOT / 'results' / 'curve_window_0.75'}",
                                   "--json", tmp_path / "w.json")
    assert code == 0 and err == "", err
    got = json.loads((tmp_path / "w.json").read_text())
    assert {(r["fraction"], r["chains"]) for r in got["rows"]} == {(0.25, 1), (0.25, 10), (0.75, 1), (0.75, 10)}
    assert got["chosen"] == min(got["rows"], key=lambda r: r["score"]) and "(chosen)" in out
    assert all(math.isfinite(r["score"]) and r["score"] > 0 for r in got["rows"])
