"""The user's table: a comma-separated file with a header row, every column numeric, one named target column
(the task string's :target=COLUMN); the other columns are the features.

`read_csv_data` checks everything before any run: unreadable file, no header, duplicate or empty column names,
an unknown target, rows with the wrong number of values, non-numeric, empty or non-finite values (each one
DatasetError line naming the file, the column and the line), and too few rows.  The rows are shuffled with
np.random.default_rng(seed) and the last round(test·n) become the test set; tasks.data.user then holds out the
validation rows and z-scores with the training statistics."""
from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np

from tasks.data.base import DatasetError, UserData, check_data_file

_INT = re.compile(r"^[+-]?\d+$")


def _rows(path: Path) -> list[tuple[int, list[str]]]:
    """(line number, stripped cells) of the non-blank lines."""
    check_data_file(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: unreadable as UTF-8 text ({type(e).__name__})") from None
    try:
        cells = list(csv.reader(text.splitlines()))
    except csv.Error as e:
        raise DatasetError(f"{path}: not a CSV table ({e})") from None
    return [(i, [c.strip() for c in row]) for i, row in enumerate(cells, 1) if any(c.strip() for c in row)]


def _header(path: Path, rows, target: str) -> list[str]:
    if not rows:
        raise DatasetError(f"{path}: empty file (expected a header row and data rows)")
    header = rows[0][1]
    if any(not name for name in header):
        raise DatasetError(f"{path}: empty column name in the header (column {header.index('') + 1})")
    dup = next((n for n in header if header.count(n) > 1), None)
    if dup is not None:
        raise DatasetError(f"{path}: column {dup!r} appears twice in the header")
    if target not in header:
        raise DatasetError(f"{path}: no column {target!r} for :target= (columns: {', '.join(header)})")
    if len(header) < 2:
        raise DatasetError(f"{path}: only the target column {target!r}; no feature columns")
    if len(rows) < 2:
        raise DatasetError(f"{path}: a header but no data rows")
    for lineno, row in rows[1:]:
        if len(row) != len(header):
            raise DatasetError(f"{path}: line {lineno} has {len(row)} values, the header has {len(header)} columns")
    return header


def _column(path: Path, name: str, lines: list[int], tokens: list[str]) -> np.ndarray:
    """One column's values (float64); DatasetError at its first empty, non-numeric or non-finite value."""
    values = np.empty(len(tokens), np.float64)
    for i, tok in enumerate(tokens):
        if not tok:
            raise DatasetError(f"{path}: column {name!r} has an empty value (line {lines[i]})")
        try:
            v = float(tok)
        except ValueError:
            raise DatasetError(f"{path}: column {name!r} is not numeric (line {lines[i]}: {tok!r})") from None
        if not math.isfinite(v):
            raise DatasetError(f"{path}: column {name!r} has a non-finite value (line {lines[i]}: {tok!r})")
        values[i] = v
    return values


def read_csv_data(path, target: str, test: float = 0.2, seed: int = 0) -> UserData:
    """The checked table `path` split into train / test (module docstring) as UserData."""
    path = Path(path)
    rows = _rows(path)
    header = _header(path, rows, target)
    lines = [lineno for lineno, _ in rows[1:]]
    columns = {name: _column(path, name, lines, [row[j] for _, row in rows[1:]]) for j, name in enumerate(header)}
    t = header.index(target)
    integer = all(_INT.match(row[t]) for _, row in rows[1:])
    x = np.stack([columns[n] for n in header if n != target], axis=1)
    y = columns[target]
    n = len(y)
    n_test = round(test * n)
    if n_test < 1 or n - n_test < 3:
        raise DatasetError(f"{path}: {n} rows are too few for a test fraction of {test:g} "
                           f"({n_test} test rows; at least 1 test and 3 training rows)")
    perm = np.random.default_rng(seed).permutation(n)
    train, held = perm[:n - n_test], perm[n - n_test:]
    return UserData(
        where=str(path),
        x={"train": x[train], "test": x[held]},
        y={"train": y[train].astype(np.int64) if integer else y[train],
           "test": y[held].astype(np.int64) if integer else y[held]},
        y_names={"train": f"column {target!r} (training rows)", "test": f"column {target!r} (test rows)"},
        integer_targets=integer,
    )
