"""The seeded property-based fuzz of tests/test_fuzz_grammar.py extended to the files of the budget curves (issue 40,
item 5): the same property — every generated input the project must refuse gives exit status 2, exactly one stderr
line starting `error:`, and every file under the case's directory unchanged — on

  draw_files      a reference's draw_probs.npz (the committed wine/mlp-16 reference, copied) with one to three random
                  changes: an array's dtype or number of dimensions, draws / rows / classes cut, rows shifted, permuted
                  or out of range, chain indices beyond the chains, probabilities negative, above 1, non-finite, off a
                  row sum or all the same, arrays dropped or added, a subset of rows named rightly (valid), a
                  header declaring 10⁹ draws, the archive truncated or a byte flipped (`evaluate curve
                  --reference`);
  curve_merge     one part of a two-part merge (the committed curve_window_0.25 run split in two) mutated field by
                  field with random JSON, or damaged as text (`evaluate curve --merge A --merge B`);
  select_window   a run's curve.json mutated or damaged the same way (`python -m bench.select_window`).

An input the readers accept is recognised beforehand in-process (tasks.reference.load_draws; the merge's schema check,
merge_results and the report; select_window's schema check and scores) and counted "valid": a valid draw file or
window selection is not run (it would start chains or score a run), a valid merge is run and must exit 0 (a merge
runs no chain). Size: $L2E_FUZZ_CASES (default 60) per family, halved for draw_files and select_window and a third for
curve_merge (the merges that run write their PNGs): 30 + 20 + 30 = 80 cases by default, from seed $L2E_FUZZ_SEED; the
counts are printed (`pytest -s`). Recorded: seed 0 generates 80 cases and runs 73 (7 accepted: 2 draw files, 1 merge,
run to exit 0, 4 window selections); seeds 1 and 2 with 300 per family, 400 generated each, 350 / 346 run, no failure.
The sampler-override family lives with the other grammar families.
"""
from __future__ import annotations

import io
import json
import random
import shutil
import zipfile
from pathlib import Path

import numpy as np

from conftest import ROOT, run_cli
from test_fuzz import snapshot
from test_fuzz_grammar import CASES, SEED, _accepts, check_refused, count, json_text, mutate, report_counts  # noqa: F401
from test_reference_schema import WINE, _forged, reference_copy, select_window

RUN = ROOT / "results" / "curve_window_0.25"


# --------------------------------------------------------------------------- draw files


def _change(rng: random.Random, g: np.random.Generator, arrays: dict) -> None:
    """One random change of the draw file's arrays (module doc)."""
    key = rng.choice(list(arrays))
    a = arrays[key]
    r = rng.random()
    if r < 0.12:
        dtype = rng.choice(["float16", "float64", "int8", "uint16", "int64", "bool", "complex64", "U3"])
        arrays[key] = a.astype(dtype) if dtype != "U3" else a.astype(str)
    elif r < 0.2:
        arrays[key] = a.reshape(-1) if a.ndim > 1 else np.stack([a, a], axis=-1)
    elif r < 0.32:  # draws, rows or classes cut
        axis = rng.randrange(a.ndim)
        arrays[key] = np.take(a, np.arange(rng.randint(0, max(0, a.shape[axis] - 1))), axis=axis)
    elif r < 0.44 and "probs" in arrays and arrays["probs"].ndim > 1:  # rows: shifted, permuted, out of range
        n = arrays["probs"].shape[1]
        rows = np.arange(n)
        rows = rng.choice([rows + 1, rows[::-1], g.permutation(rows), rows * 2, rows - 1, rows + 10**6])
        arrays["rows"] = rows.astype(rng.choice([np.int64, np.int32, np.uint8]))
    elif r < 0.5 and "chain" in arrays:
        arrays["chain"] = arrays["chain"].astype(np.int64) + rng.choice([4, -1, 2**15 - 5])
    elif r < 0.7 and "probs" in arrays and arrays["probs"].ndim == 3 and arrays["probs"].size \
            and arrays["probs"].dtype.kind in "fiub":  # probabilities
        p = arrays["probs"].astype(np.float32)
        d, i = rng.randrange(p.shape[0]), rng.randrange(p.shape[1])
        p[d, i, rng.randrange(p.shape[2])] = rng.choice([-0.01, 1.5, np.nan, np.inf, 3e38, 0.0, 1.0])
        arrays["probs"] = rng.choice([p, np.full_like(p, 1.0 / p.shape[2]), p * 1.01, p[::-1], p[:, ::-1]])
    elif r < 0.78:
        del arrays[key]
    elif r < 0.9 and "probs" in arrays and arrays["probs"].ndim == 3 and "rows" not in arrays:  # a subset of rows,
        keep = np.sort(g.choice(arrays["probs"].shape[1], rng.randint(1, 8), replace=False))  # named rightly
        arrays["probs"], arrays["rows"] = arrays["probs"][:, keep], keep
    else:
        arrays[rng.choice(["extra", "rows", "weights"])] = g.normal(size=(3,))


def _rand_draw_file(rng: random.Random, path: Path, good: dict) -> None:
    """The good draw file with one to three changes (`_change`), or damaged as bytes (module doc)."""
    g = np.random.default_rng(rng.randrange(2**32))
    arrays = {k: v.copy() for k, v in good.items()}
    for _ in range(rng.randint(1, 3)):
        _change(rng, g, arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = buf.getvalue()
    r = rng.random()
    if r < 0.08:
        data = data[: rng.randrange(max(1, len(data)))]
    elif r < 0.14:
        b = bytearray(data)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        data = bytes(b)
    elif r < 0.17:
        data = _forged((10**9, 36, 3))
    path.write_bytes(data)


def test_fuzz_draw_files(tmp_path):
    from tasks.reference import load_draws

    rng = random.Random(f"{SEED}-draws")
    ref = reference_copy(tmp_path / "ref", WINE)
    with np.load(ROOT / "results" / "references" / "wine_mlp-16" / "draw_probs.npz") as z:
        good = {k: z[k] for k in z.files}
    path = ref / "wine_mlp-16" / "draw_probs.npz"
    for i in range(max(4, CASES // 2)):
        count("draw_files", "generated")
        _rand_draw_file(rng, path, good)
        if _accepts(lambda: load_draws(ref / "wine_mlp-16", "classification")):
            count("draw_files", "valid")  # a readable draw file: the curves would run
            continue
        check_refused("draw_files", "evaluate", ["curve", "--reference", str(ref), "--set", "methods=sghmc",
                                                 "--quiet", "--output", str(tmp_path / "out")], tmp_path)


# --------------------------------------------------------------------------- curve merges


def _parts(tmp_path: Path) -> tuple[Path, Path, dict]:
    """Two parts of the committed run (one row each), written as a/ and b/; b's parsed curve.json."""
    run = json.loads((RUN / "curve.json").read_text())
    out = []
    for name, keep in (("a", "l2e_transient"), ("b", "l2e_transient@M=10")):
        part = json.loads(json.dumps(run))
        for task in part["tasks"].values():
            task["methods"] = {keep: task["methods"][keep]}
        part["off_curve"] = {f"note_{name}": "left out"}
        (tmp_path / name).mkdir()
        (tmp_path / name / "curve.json").write_text(json.dumps(part))
        out.append(part)
    return tmp_path / "a", tmp_path / "b", out[1]


def _merge_accepts(a: Path, b: Path) -> bool:
    """What `evaluate curve --merge a --merge b` reads and renders before writing, in-process."""
    from base.io import read_json
    from evaluate.curve.report import curve_markdown, merge_results
    from evaluate.curve.schema import check_curve_result

    def run():
        parts = [check_curve_result(read_json(d / "curve.json", str(d)), str(d)) for d in (a, b)]
        curve_markdown({**merge_results(parts), "merged": [str(a), str(b)]})

    return _accepts(run)


def test_fuzz_curve_merges(tmp_path):
    rng = random.Random(f"{SEED}-merge")
    a, b, good = _parts(tmp_path)
    for i in range(max(4, CASES // 3)):
        count("curve_merge", "generated")
        (b / "curve.json").write_text(json_text(rng, mutate(rng, good)))
        out = tmp_path / "merged"
        argv = ["curve", "--merge", str(a), "--merge", str(b), "--output", str(out)]
        if _merge_accepts(a, b):
            count("curve_merge", "valid")  # a merge runs no chain: it must then succeed
            proc = run_cli("evaluate", *argv)
            assert proc.returncode == 0 and (out / "curve.md").is_file(), proc.stderr[-2000:]
            shutil.rmtree(out)
            continue
        check_refused("curve_merge", "evaluate", argv, tmp_path)


# --------------------------------------------------------------------------- window selection


def test_fuzz_select_window(tmp_path):
    from bench.select_window import _runs, scores

    rng = random.Random(f"{SEED}-window")
    good = json.loads((RUN / "curve.json").read_text())
    run = tmp_path / "run"
    run.mkdir()
    for i in range(max(4, CASES // 2)):
        count("select_window", "generated")
        (run / "curve.json").write_text(json_text(rng, mutate(rng, good)))
        argv = ["--run", f"0.25={run}", "--run", f"0.75={ROOT / 'results' / 'curve_window_0.75'}",
                "--json", str(tmp_path / "w.json")]
        def accepted():
            if not scores(_runs([argv[1], argv[3]]), "l2e_transient"):
                raise ValueError("no row: refused")

        if _accepts(accepted):
            count("select_window", "valid")  # a readable run: the selection would be scored and written
            continue
        before = snapshot(tmp_path)
        code, out, err = select_window(*argv)
        lines = err.splitlines()
        count("select_window", "run")
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (argv, code, err[-2000:])
        assert snapshot(tmp_path) == before
