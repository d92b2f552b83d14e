"""A seeded property-based fuzz (issue 28, item 7) over the file schemas and the `--set` / task-string grammar.

Property, for every generated input that the project must refuse: the CLI exits with status 2 (an input error; 1
would be an unexpected exception caught by the guard), prints exactly one stderr line and it starts `error:`, and
every file under the case's directory (the inputs, the output and their neighbours) is unchanged
(tests/test_fuzz.py's snapshot).

Families (each a generator of random types, nesting depths and sizes, driven by one `random.Random(seed)`):
  set_evaluate / set_meta_train  `--set KEY=VALUE` with keys of the configuration (nested ones included) or
                                 unknown, values of random type and size;
  task_string                    `--task` strings built from the grammar's pieces (tasks.spec_parse.GRAMMAR) and
                                 mutated (huge numbers, repeated or unknown keys, junk characters);
  reference_index                reference.json of a marked reference directory (`evaluate reference
                                 --overwrite`) replaced by random JSON or mutated;
  reference_metadata             a reference's metadata.json mutated field by field (`evaluate --reference`);
  run_files                      a meta-training run's config.json / log.jsonl mutated (`meta_train --resume`);
  checkpoint_metadata            a checkpoint's meta/metadata mutated (`evaluate --sampler`);
  task_list                      `--set tasks=@FILE` with random file contents (`meta_train`);
  npz_data                       `--task npz:FILE/mlp-4` with random arrays: dtypes, shapes, lengths, huge or
                                 non-finite values, labels beyond any class count, missing keys, truncated files;
  csv_data                       `--task csv:FILE:target=y/mlp-4` with random tables: header cells emptied,
                                 duplicated or dropped, ragged rows, empty / non-numeric / overflowing / non-finite
                                 cells, huge labels, constant columns, BOMs, NUL and non-UTF-8 bytes, truncation;
  sampler_overrides              `--set settings.<learned method>.sampler=field=value,…` for every learned method
                                 (fields of its checkpoint's kind, the learning rate, unknown or empty ones, a field
                                 given twice, the window's freeze_step / window_fraction; thinning set or not);
  load_sampler                   `l2e.load_sampler(name, **overrides)` for every shipped name with random Python
                                 values (bools, strings, None, NaN, arrays, lists): builds, or one ValueError line.
A generated input that the project accepts (it would start a run) is recognised beforehand by calling the same
readers in-process, and is counted as "valid" and not run.

Size: $L2E_FUZZ_CASES cases per family (default 60; run_files, task_list and set_meta_train a third, npz_data and
checkpoint_metadata, csv_data and sampler_overrides a half, load_sampler a tenth per shipped name) from seed
$L2E_FUZZ_SEED (default 0); the counts are printed (`pytest -s`). sampler_overrides and load_sampler (issue 40) in
the default run: 72 generated, 67 run; with seeds 1 and 2, 300 per family: 360 / 332 and 360 / 329, no failure.
Recorded (2-core machine under load): the default run generates 390 cases and runs 324 (66 are accepted inputs, not
run), about 30 s (before csv_data: 360 / 296, about 25 s); csv_data alone with seeds 1 and 2, 600 per family:
600 generated / 568 run, no failure; seed 1 with 300 per family (before npz_data and checkpoint_metadata existed) 1500 generated /
1283 run, seed 2 with 200 per family (before checkpoint_metadata) 1098 / 943, checkpoint_metadata alone with seeds
1 and 2, 300 each: 600 / 272 — no failure.
Failures found while writing it, and fixed: one class — a run's config.json whose list field holds an item of
another type (a number among tasks.datasets) escaped `meta_train --resume` as an AttributeError (status 1) instead
of a ConfigError line; base.io.dataclass_from_dict now checks every list item against its field's type.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import string
from pathlib import Path

import pytest

from cli import write_marker
from conftest import ROOT, run_cli
from test_fuzz import snapshot

SEED = int(os.environ.get("L2E_FUZZ_SEED", "0"))
CASES = int(os.environ.get("L2E_FUZZ_CASES", "60"))
COUNTS: dict[str, dict[str, int]] = {}


# --------------------------------------------------------------------------- random values


def rand_scalar(rng: random.Random):
    return rng.choice([
        lambda: None, lambda: rng.random() < 0.5, lambda: rng.randint(-3, 3), lambda: rng.choice([2**31, 2**32 + 1,
                                                                                                 2**63, 2**64, -2**70]),
        lambda: rng.uniform(-1e3, 1e3), lambda: rng.choice([1e308, -1e308, 5e-324]),
        lambda: "".join(rng.choices(string.printable, k=rng.randint(0, 12))),
        lambda: "x" * rng.choice([300, 5000]), lambda: rng.choice(["NaN", "inf", "", " ", "null", "digits"]),
    ])()


def rand_json(rng: random.Random, depth: int = 0):
    """A random JSON value: scalars, lists and objects, sometimes wide, sometimes deep."""
    r = rng.random()
    if depth > 4 or r < 0.5:
        return rand_scalar(rng)
    if r < 0.75:
        return [rand_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rand_key(rng): rand_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def rand_key(rng: random.Random) -> str:
    return rng.choice(["", "a", "dir", "kind", "spec", "data", "0", "é", "../x", "x" * 200])


def deep_text(rng: random.Random) -> str:
    depth = rng.choice([65, 1000, 200_000])
    open_, close = rng.choice([("[", "]"), ('{"a":', "}")])
    return open_ * depth + "1" + close * depth


def json_text(rng: random.Random, value) -> str:
    """`value` as JSON text, or one of the ways a file gets damaged."""
    r = rng.random()
    text = json.dumps(value)
    if r < 0.15:
        return deep_text(rng)
    if r < 0.25:
        return text[: rng.randint(0, max(0, len(text) - 1))]  # truncated
    if r < 0.3:
        return text.replace(":", "=", 1) if ":" in text else text + "}"
    return text


def mutate(rng: random.Random, value):
    """`value` (a parsed JSON document) with one random change at a random place: a field's value replaced by
    random JSON, a field removed, a junk field added, or the whole document wrapped or replaced."""
    value = json.loads(json.dumps(value))
    holders = [value]
    stack = [value]
    while stack:
        v = stack.pop()
        for child in (v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()):
            if isinstance(child, (dict, list)):
                holders.append(child)
                stack.append(child)
    r = rng.random()
    if r < 0.08:
        return rand_json(rng)
    if r < 0.12:
        return [value]
    target = rng.choice(holders)
    if isinstance(target, dict) and target:
        key = rng.choice(list(target))
        if r < 0.25:
            del target[key]
        else:
            target[key] = rand_json(rng)
    elif isinstance(target, list) and target:
        target[rng.randrange(len(target))] = rand_json(rng)
    else:
        return rand_json(rng)
    return value


# --------------------------------------------------------------------------- the property


def check_refused(family: str, tool: str, argv: list, case_dir: Path) -> None:
    before = snapshot(case_dir)
    proc = run_cli(tool, *argv)
    lines = proc.stderr.splitlines()
    ok = (proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ")
          and snapshot(case_dir) == before)
    COUNTS.setdefault(family, {"generated": 0, "valid": 0, "run": 0})["run"] += 1
    assert ok, (family, argv, proc.returncode, proc.stderr[-2000:],
                "directory changed" if snapshot(case_dir) != before else "")


def count(family: str, what: str) -> None:
    COUNTS.setdefault(family, {"generated": 0, "valid": 0, "run": 0})[what] += 1


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    total = {k: sum(c[k] for c in COUNTS.values()) for k in ("generated", "valid", "run")}
    print(f"\nfuzz (seed {SEED}, {CASES} per family): {COUNTS}; total {total}")


def _accepts(fn) -> bool:
    try:
        fn()
    except Exception:
        return False
    return True


# --------------------------------------------------------------------------- --set grammar


def _set_keys(cfg, prefix: str = "") -> list[str]:
    import dataclasses

    keys = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            keys += _set_keys(value, f"{prefix}{f.name}.")
        else:
            keys.append(prefix + f.name)
    return keys


def _set_value(rng: random.Random) -> str:
    v = rand_scalar(rng)
    r = rng.random()
    if r < 0.2:
        return ",".join(str(rand_scalar(rng)) for _ in range(rng.randint(0, 5)))
    if r < 0.3:
        return str(rng.choice([10**9, 10**12, 10**30, -1, 0])) + rng.choice(["", ".5", "e400"])
    if r < 0.35:
        return "@" + rng.choice(["/dev/zero", "/nonexistent", "/"])
    return json.dumps(v) if rng.random() < 0.3 else str(v)


@pytest.mark.parametrize("tool", ["evaluate", "meta_train"])
def test_fuzz_set_grammar(tool, tmp_path):
    from cli import apply_overrides

    if tool == "evaluate":
        from evaluate.config import get_preset

        base, common = get_preset("smoke"), ["--preset", "smoke", "--quiet"]
    else:
        from meta_train import PRESETS

        base, common = PRESETS["smoke"], ["--preset", "smoke", "--no-progress"]
    rng = random.Random(f"{SEED}-set-{tool}")
    keys = _set_keys(base) + ["nope", "es.nope", "settings.sghmc.nope", ""]
    family = f"set_{tool}"
    n = CASES if tool == "evaluate" else max(4, CASES // 3)
    for i in range(n):
        count(family, "generated")
        sets = [f"{rng.choice(keys)}={_set_value(rng)}" for _ in range(rng.randint(1, 3))]
        if _accepts(lambda: apply_overrides(base, sets).check_budget() if tool == "evaluate"
                    else apply_overrides(base, sets)):
            count(family, "valid")
            continue
        case = tmp_path / str(i)
        case.mkdir()
        argv = [*common, "--output", str(case / "out")] + [a for s in sets for a in ("--set", s)]
        check_refused(family, tool, argv, case)


# --------------------------------------------------------------------------- task strings


DATASETS = ["iris", "wine", "digits", "breast_cancer", "nosuchset", "npz:{npz}", "csv:{csv}", "npz:/nonexistent.npz",
            "csv:{csv}:target=y", "csv:{csv}:target=nope", ""]
MODELS = ["mlp-4", "mlp-8x8-tanh", "mlp-linear", "mlp-0", "mlp-99999999999", "mlp-3000000", "mlp-40000x40000",
          "cnn-c4-d1", "cnn-c0-d1", "resnet20-frn", "mlp-4-nope", "", "mlp-", "cnn-c4-d999"]
OPTIONS = ["prior=0.2", "prior=-1", "prior=nan", "prior=1e400", "valid=0.5", "valid=1.5", "max=10", "max=0",
           "max=99999999999999999999", "classes=3", "classes=100000000", "likelihood=regression", "likelihood=x",
           "seed=-1", "test=2", "weight=1", "nope=1", "prior=", "=", "prior=0.1"]


def _task_string(rng: random.Random, npz: Path, csv: Path) -> str:
    data = rng.choice(DATASETS).format(npz=npz, csv=csv)
    text = data + ("/" + rng.choice(MODELS) if rng.random() < 0.85 else "")
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        text += ":" + rng.choice(OPTIONS)
    r = rng.random()
    if r < 0.15:
        pos = rng.randrange(len(text) + 1)
        text = text[:pos] + "".join(rng.choices(string.punctuation + "é\t ", k=rng.randint(1, 3))) + text[pos:]
    elif r < 0.2:
        text = text * rng.randint(2, 50)
    return text


def _task_data(d: Path) -> tuple[Path, Path]:
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    y = rng.integers(0, 3, 40)
    np.savez(d / "d.npz", x_train=x, y_train=y, x_test=x[:10], y_test=y[:10])
    rows = ["a,b,y"] + [f"{a:.3f},{b:.3f},{int(c)}" for a, b, c in zip(x[:, 0], x[:, 1], y)]
    (d / "d.csv").write_text("\n".join(rows) + "\n")
    return d / "d.npz", d / "d.csv"


def test_fuzz_task_strings(tmp_path):
    from evaluate.cli_common import with_task_strings
    from evaluate.config import get_preset
    from tasks import TaskCache, build

    data = tmp_path / "data"
    data.mkdir()
    npz, csv = _task_data(data)
    rng = random.Random(f"{SEED}-task")
    base = get_preset("smoke")

    def accepted(text):
        cfg = with_task_strings(base, [text], None)
        cache = TaskCache()
        for spec in cfg.tasks:
            build(spec, cache)

    for i in range(CASES):
        count("task_string", "generated")
        text = _task_string(rng, npz, csv)
        if _accepts(lambda: accepted(text)):
            count("task_string", "valid")
            continue
        check_refused("task_string", "evaluate", ["--preset", "smoke", "--quiet", "--task", text,
                                                  "--output", str(tmp_path / "out")], tmp_path)


def test_fuzz_task_list_files(tmp_path):
    from tasks.task_strings import parse_task_list, weighted_specs

    rng = random.Random(f"{SEED}-tasklist")
    data = tmp_path / "data"
    data.mkdir()
    npz, csv = _task_data(data)
    for i in range(max(4, CASES // 3)):
        count("task_list", "generated")
        f = tmp_path / f"tasks{i}.txt"
        r = rng.random()
        if r < 0.2:
            f.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))))
        elif r < 0.3:
            f.write_text("# only comments\n\n")
        else:
            f.write_text("\n".join(_task_string(rng, npz, csv) for _ in range(rng.randint(1, 4))) + "\n")

        if _accepts(lambda: weighted_specs(parse_task_list(f"@{f}"))):
            count("task_list", "valid")
            continue
        check_refused("task_list", "meta_train", ["--preset", "smoke", "--no-progress", "--output",
                                                  str(tmp_path / "out"), "--set", f"tasks=@{f}"], tmp_path)


# --------------------------------------------------------------------------- npz / csv data


def _rand_npz(rng: random.Random, path: Path) -> None:
    """A valid classification npz (x (n, 3) float32, labels 0..2) with one to three random changes: an array's dtype
    or shape, huge / non-finite / out-of-range values, a label of 2**32 + 1, a key dropped or added, the file
    truncated."""
    import numpy as np

    g = np.random.default_rng(rng.randrange(2**32))
    n = rng.choice([2, 8, 20])
    arrays = {"x_train": g.normal(size=(n, 3)).astype(np.float32), "y_train": np.arange(n) % 3,
              "x_test": g.normal(size=(4, 3)).astype(np.float32), "y_test": np.arange(4) % 3}
    if rng.random() < 0.3:
        arrays.update(x_valid=g.normal(size=(3, 3)).astype(np.float32), y_valid=np.arange(3) % 3)
    truncate = False
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(list(arrays))
        a = arrays[key]
        r = rng.random()
        if r < 0.2:
            dtype = rng.choice(["float16", "float64", "int8", "uint8", "int64", "uint64", "bool", "complex64", "U3",
                                "datetime64[s]"])
            try:
                arrays[key] = a.astype(dtype)
            except (TypeError, ValueError):
                arrays[key] = a.astype(str)
        elif r < 0.35:
            arrays[key] = a.reshape(-1) if a.ndim > 1 else np.stack([a, a], axis=-1)
        elif r < 0.45:
            arrays[key] = a[: rng.randint(0, max(0, len(a) - 1))]
        elif r < 0.65 and a.size:
            a = a.astype(np.float64) if rng.random() < 0.5 or a.dtype.kind != "i" else a.copy()
            value = rng.choice([float("nan"), float("inf"), 3e38, -3e38, 1e300, -1.0, 2.0**32 + 1, 1e6, 0.5])
            if a.dtype.kind == "i":
                value = rng.choice([-1, 2**32 + 1, 2**62, 10**6])
            a.flat[rng.randrange(a.size)] = value
            arrays[key] = a
        elif r < 0.75:
            arrays[key] = a * rng.choice([3e38, 1e-40, 0.0])
        elif r < 0.85:
            del arrays[key]
        elif r < 0.92:
            arrays[rng.choice(["x_valid", "y_valid", "extra"])] = g.normal(size=(3, 3))
        else:
            truncate = True
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    if truncate:
        path.write_bytes(path.read_bytes()[: rng.randrange(max(1, path.stat().st_size))])


def _fuzz_data_files(tmp_path: Path, family: str, write, file_name: str, task_string, options: list[str]) -> None:
    """The npz / csv data families: per case `write(rng, FILE)` and the task string `task_string(FILE)` plus one of
    `options`; an input the task builder accepts counts as valid, any other must be refused (check_refused)."""
    from evaluate.cli_common import with_task_strings
    from evaluate.config import get_preset
    from tasks import TaskCache, build

    rng = random.Random(f"{SEED}-{family.split('_')[0]}")
    base = get_preset("smoke")
    for i in range(max(4, CASES // 2)):
        count(family, "generated")
        case = tmp_path / str(i)
        case.mkdir()
        write(rng, case / file_name)
        text = task_string(case / file_name) + rng.choice(options)

        def accepted():
            cfg = with_task_strings(base, [text], None)
            build(cfg.tasks[0], TaskCache())

        if _accepts(accepted):
            count(family, "valid")
            continue
        check_refused(family, "evaluate", ["--preset", "smoke", "--quiet", "--task", text,
                                           "--output", str(case / "out")], case)


def test_fuzz_npz_data(tmp_path):
    _fuzz_data_files(tmp_path, "npz_data", _rand_npz, "d.npz", lambda f: f"npz:{f}/mlp-4",
                     ["", ":likelihood=regression", ":classes=3"])


def _rand_csv(rng: random.Random, path: Path) -> None:
    """A valid table (header a,b,y; y integer labels 0..2 or real) with one to three random changes: a header cell
    emptied, duplicated, renamed or dropped; a row shortened or lengthened; a cell emptied, made non-numeric, huge
    (1e309 overflows to inf), nan / inf, a huge integer label; rows dropped; a constant column; quotes, a BOM, bytes
    that are not UTF-8, NUL bytes, a very long line; the file truncated."""
    n = rng.choice([3, 6, 20])
    real = rng.random() < 0.3
    header = ["a", "b", "y"]
    rows = [[f"{rng.gauss(0, 1):.3f}", f"{rng.gauss(0, 1):.3f}",
             f"{rng.gauss(0, 1):.3f}" if real else str(i % 3)] for i in range(n)]
    raw: bytes | None = None
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        i = rng.randrange(len(rows)) if rows else 0
        j = rng.randrange(len(rows[i])) if rows and rows[i] else 0
        if r < 0.15:
            header[rng.randrange(3)] = rng.choice(["", "a", "y", "b c", "\"", "y" * 300])
        elif r < 0.25 and rows:
            rows[i] = rows[i][:rng.randrange(3)] if rng.random() < 0.5 else rows[i] + ["1"]
        elif r < 0.5 and rows and rows[i]:
            rows[i][j] = rng.choice(["", "abc", "1e309", "-1e309", "nan", "inf", "0x10", "1,5", "\"1\"",
                                     str(2**32 + 1), str(2**70), "-1", "1e-320", "  ", "1_000", "٣"])
        elif r < 0.6 and rows:
            del rows[rng.randrange(len(rows)):]
        elif r < 0.7:
            c = rng.randrange(3)
            for row in rows:
                if c < len(row):
                    row[c] = "1"
        elif r < 0.8:
            raw = rng.choice([b"\xef\xbb\xbf", b"\xff\xfe", b"\x00", b"\x80\x81"])
        elif r < 0.9 and rows and rows[i]:
            rows[i][j] = "9" * rng.choice([400, 5000])
        else:
            raw = b"truncate"
    text = "\n".join(",".join(row) for row in [header] + rows) + "\n"
    data = text.encode()
    if raw == b"truncate":
        data = data[: rng.randrange(max(1, len(data)))]
    elif raw is not None:
        pos = rng.randrange(len(data) + 1) if raw != b"\xef\xbb\xbf" else 0
        data = data[:pos] + raw + data[pos:]
    path.write_bytes(data)


def test_fuzz_csv_data(tmp_path):
    _fuzz_data_files(tmp_path, "csv_data", _rand_csv, "d.csv", lambda f: f"csv:{f}:target=y/mlp-4",
                     ["", ":likelihood=regression", ":classes=3", ":test=0.5", ":classes=2"])


# --------------------------------------------------------------------------- reference files


REF = ROOT / "results" / "references"
TASK = "digits/mlp-32"


def _reference_copy(dst: Path) -> Path:
    dst.mkdir()
    entry = json.loads((REF / "reference.json").read_text())[TASK]
    shutil.copytree(REF / entry["dir"], dst / entry["dir"], ignore=shutil.ignore_patterns("draw_probs.npz"))
    (dst / "reference.json").write_text(json.dumps({TASK: entry}, indent=1))
    write_marker(dst, "reference")
    return dst


def test_fuzz_reference_index(tmp_path):
    from tasks.reference import read_index

    rng = random.Random(f"{SEED}-index")
    ref = _reference_copy(tmp_path / "ref")
    good = json.loads((ref / "reference.json").read_text())
    for i in range(CASES):
        count("reference_index", "generated")
        (ref / "reference.json").write_text(json_text(rng, mutate(rng, good)))
        if _accepts(lambda: read_index(ref)):
            count("reference_index", "valid")  # a readable index: --overwrite would recompute the preset's tasks
            continue
        check_refused("reference_index", "evaluate", ["reference", "--preset", "smoke", "--quiet", "--overwrite",
                                                      "--output", str(ref)], tmp_path)


def test_fuzz_reference_metadata(tmp_path):
    from tasks import build
    from tasks.reference.read import load_reference_dir
    from tasks.task_strings import resolve_tasks

    rng = random.Random(f"{SEED}-metadata")
    ref = _reference_copy(tmp_path / "ref")
    entry = json.loads((ref / "reference.json").read_text())[TASK]
    meta_file = ref / entry["dir"] / "metadata.json"
    good = json.loads(meta_file.read_text())
    task = build(resolve_tasks([TASK], None)[0].spec)
    for i in range(CASES):
        count("reference_metadata", "generated")
        meta_file.write_text(json_text(rng, mutate(rng, good)))
        if _accepts(lambda: load_reference_dir(ref, TASK, task)):
            count("reference_metadata", "valid")
            continue
        check_refused("reference_metadata", "evaluate", [
            "--preset", "smoke", "--quiet", "--set", "methods=sghmc", "--task", TASK, "--reference", str(ref),
            "--output", str(tmp_path / "out")], tmp_path)


# --------------------------------------------------------------------------- checkpoint metadata


def test_fuzz_checkpoint_metadata(tmp_path):
    """The shipped paper-form step directory copied and its meta/metadata mutated (`evaluate --sampler`)."""
    from l2e.checkpoint import load_meta_params

    rng = random.Random(f"{SEED}-checkpoint")
    step = tmp_path / "ckpt"
    shutil.copytree(ROOT / "checkpoints" / "paper_form", step,
                    ignore=shutil.ignore_patterns("*.png", "log.jsonl", "PROVENANCE.md"))
    meta_file = step / "meta" / "metadata"
    good = json.loads(meta_file.read_text())
    for i in range(max(4, CASES // 2)):
        count("checkpoint_metadata", "generated")
        meta_file.write_text(json_text(rng, mutate(rng, good)))
        if _accepts(lambda: load_meta_params(step)):
            count("checkpoint_metadata", "valid")
            continue
        check_refused("checkpoint_metadata", "evaluate", [
            "--preset", "smoke", "--quiet", "--set", "methods=l2e", "--sampler", str(step),
            "--output", str(tmp_path / "out")], tmp_path)


# --------------------------------------------------------------------------- run files


def test_fuzz_run_files(tmp_path):
    from meta_train import PRESETS
    from meta_train.run_dir import _check_resumable, read_log

    rng = random.Random(f"{SEED}-run")
    run = tmp_path / "run"
    run.mkdir()
    config = PRESETS["smoke"].to_dict()
    rows = [{"iteration": i, "meta_loss": 1.0 + i} for i in range(3)]
    write_marker(run, "run")
    for i in range(max(4, CASES // 3)):
        count("run_files", "generated")
        which = rng.choice(["config", "log"])
        if which == "config":
            (run / "config.json").write_text(json_text(rng, mutate(rng, config)))
            (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            (run / "config.json").write_text(json.dumps(config))
            bad = rng.randrange(len(rows))
            lines = [json.dumps(r) for r in rows]
            lines[bad] = json_text(rng, mutate(rng, rows[bad]))
            (run / "log.jsonl").write_text("\n".join(lines) + "\n")

        def accepted():  # a resumable run: --resume would start meta-training (a run, not a file case)
            _check_resumable(run, PRESETS["smoke"])
            read_log(run)

        if _accepts(accepted):
            count("run_files", "valid")
            continue
        check_refused("run_files", "meta_train", ["--preset", "smoke", "--no-progress", "--resume",
                                                  "--output", str(run)], tmp_path)


# --------------------------------------------------------------------------- sampler overrides (issue 40, class 5)


def _sampler_items(rng: random.Random, fields: list[str]) -> list[str]:
    """1–3 "field=value" items of a learned method's settings.<method>.sampler: the kind's fields (sometimes one given
    twice, the learning rate, or an unknown / empty field), values of random type and size."""
    pool = fields + ["learning_rate", "nope", "", "freeze_step", "window_fraction"]
    items = [f"{rng.choice(pool)}={_set_value(rng).replace(',', ';')}" for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.2:
        items.append(items[0])
    return items


def test_fuzz_sampler_overrides(tmp_path):
    """`--set settings.<learned method>.sampler=field=value,…` on every learned method (the `l2e` method's checkpoint
    kind is known only once loaded), with or without `thinning=none`: what the configuration and the checkpoint
    refuse (evaluate.sampler_overrides) is one error line before anything is written; and `l2e.load_sampler(name,
    **overrides)` with random Python values for every shipped kind either builds or raises one ValueError line."""
    import dataclasses

    import numpy as np

    import l2e
    from cli import apply_overrides
    from evaluate.config import get_preset
    from evaluate.methods import METHODS, get_method
    from evaluate.run import load_samplers
    from evaluate.sampler_overrides import check_sampler_overrides

    rng = random.Random(f"{SEED}-sampler")
    learned_methods = [m for m in METHODS if get_method(m).needs_sampler and m != "l2e_released"]
    base = get_preset("smoke")
    _, _, samplers = load_samplers(dataclasses.replace(base, methods=tuple(learned_methods)))
    fields = {m: [f.name for f in dataclasses.fields(samplers[n if isinstance(n, str) else "l2e"]["sampler"])]
              for m in learned_methods for n in [get_method(m).needs_sampler]}
    for i in range(max(4, CASES // 2)):
        count("sampler_overrides", "generated")
        method = rng.choice(learned_methods)
        sets = [f"methods={rng.choice([method, 'sghmc,' + method])}",
                f"settings.{method}.sampler={','.join(_sampler_items(rng, fields[method]))}"]
        sets += ["thinning=none"] if rng.random() < 0.4 else []
        if _accepts(lambda: check_sampler_overrides(apply_overrides(base, sets), samplers)):
            count("sampler_overrides", "valid")
            continue
        case = tmp_path / str(i)
        case.mkdir()
        argv = ["--preset", "smoke", "--quiet", "--output", str(case / "out")] + [a for s in sets for a in ("--set", s)]
        check_refused("sampler_overrides", "evaluate", argv, case)

    post = l2e.Posterior(lambda p, b: 0.5 * (p ** 2).sum(), lambda p: 0.0 * p.sum(), 100)
    values = [True, False, "0.1", "warm", None, float("nan"), float("inf"), -1, 0, 10**30, 2.5, np.array([0.5]),
              np.float32(0.5), np.int64(3), [1], {}]
    for name, (entry, _) in l2e.learned.shipped().items():
        names = [f.name for f in dataclasses.fields(entry.config)] + ["nope"]
        for _ in range(max(2, CASES // 10)):
            count("load_sampler", "generated")
            overrides = {rng.choice(names): rng.choice(values) for _ in range(rng.randint(1, 2))}
            try:
                l2e.load_sampler(name, posterior=post, **overrides)
            except ValueError as e:
                count("load_sampler", "run")
                assert "\n" not in str(e) and str(e), (name, overrides, str(e))
                continue
            count("load_sampler", "valid")
