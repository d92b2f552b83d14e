"""The schemas of a reference directory's files (layout: the module doc of tasks.reference), checked when they are
read, before anything is computed or written: one ReferenceDataError line names the file and the field or array.
JSON (reference.json, metadata.json): field kinds at every level that is read. .npz (draw_probs.npz,
predictive.npz): the archive and its arrays' names, dtypes, dimensions and sizes from their headers (nothing is
allocated before), then shapes against the reference, value ranges and the row order."""
from __future__ import annotations

import contextlib
import math
import os
import stat
import zipfile
import zlib
from typing import Callable

import numpy as np

from base.io import check_json_object, json_type, one_line

__all__ = ["DRAW_ARRAYS", "MAX_ARRAY_VALUES", "MAX_READ_DRAWS", "PREDICTIVE_ARRAYS", "check_draw_probs", "check_index",
           "check_metadata", "check_predictive", "npz_headers", "read_npz"]

INDEX_ENTRY = {"dir": "str", "kind": "str", "metadata": "str", "converged": "bool"}
METADATA = {"task": "str", "kind": "str", "spec": "object", "data": "object", "sampler": "null|object",
            "seed": "null|int", "num_divergent": "count", "num_grad_evals": "null|count", "seconds": "null|number",
            "finite": "bool", "function_space": "null|object", "weight_space": "null|object", "test": "null|object",
            "dispersion": "null|object", "converged": "bool", "convergence_rule": "str", "per_chain": "object"}
DATA = {"train": "count", "test": "count", "classes": "count", "test_labels_sha256": "str", "test_y_mean": "number",
        "test_y_std": "number", "input_shape": "list"}
SAMPLER = {"chains": "count", "total_draws": "count", "warmup": "count", "samples_per_chain": "count",
           "thinning": "count", "max_num_doublings": "count", "init": "str"}
DISPERSION = {"weight_norm": "null|number", "pairwise_distance": "null|number",
              "pairwise_distance_within_chain": "null|number", "predictive_variance": "null|number",
              "num_samples": "count", "split": "str"}
RHAT = {"max": "null|number", "median": "null|number"}


def _plain_name(name: str) -> bool:
    """A single path component inside the reference directory (no separator, not "." / "..", not hidden)."""
    return bool(name) and "/" not in name and "\\" not in name and "\0" not in name and not name.startswith(".")


def check_index(index, where: str, error) -> dict:
    """Check a parsed reference.json: {task name: {"dir": a plain folder name, "kind", "metadata", "converged"}}.

    Args:
      index: the parsed file.
      where: the file, for messages.
      error: the exception type raised (ReferenceDataError).
    Returns:
      `index`.
    """
    check_json_object(index, where, {}, error=error)
    for name, entry in index.items():
        check_json_object(entry, f"{where}: entry {name!r}", INDEX_ENTRY, ("dir",), error)
        if not _plain_name(entry["dir"]):
            raise error(f"{where}: entry {name!r} has dir {entry['dir']!r}, not a folder name inside the reference "
                        "directory")
    return index


def check_metadata(meta, where: str, error, formats) -> dict:
    """Check a parsed task metadata.json: field kinds at every level that is read (data, sampler, dispersion,
    function_space.split_rhat) and the kind one of `formats`.

    Args:
      meta: the parsed file.
      where: the file, for messages.
      error: the exception type raised (ReferenceDataError).
      formats: the known kinds.
    Returns:
      `meta`.
    """
    check_json_object(meta, where, METADATA, ("kind", "spec"), error)
    if meta["kind"] not in formats:
        raise error(f"{where}: field 'kind' is {json_type(meta['kind'])}, expected one of {', '.join(formats)}")
    check_json_object(meta.get("data", {}), f"{where}: field 'data'", DATA, error=error)
    for key, fields in (("sampler", SAMPLER), ("dispersion", DISPERSION)):
        if meta.get(key) is not None:
            check_json_object(meta[key], f"{where}: field {key!r}", fields, error=error)
    function_space = meta.get("function_space") or {}
    if function_space.get("split_rhat") is not None:
        check_json_object(function_space["split_rhat"], f"{where}: field 'function_space.split_rhat'", RHAT,
                          error=error)
    spec = meta["spec"]
    if "model" in spec and not isinstance(spec["model"], dict):
        raise error(f"{where}: field 'spec.model' is {json_type(spec['model'])}, expected object")
    return meta


# --------------------------------------------------------------------------- the .npz files

MAX_READ_DRAWS = 4096
"""The most per-draw predictives a reference may keep for the budget curves and the meta-training dispersion target
(`tasks.reference.load_draws`), checked from the file's array header before anything is allocated: the curves hold
the S × S distances between draws in float64 (128 MiB at 4096, a few copies while they are computed) and the K-draw
floors take 200 resamples of (S − K)² of them. `python -m evaluate reference` keeps 400 by default."""
MAX_ARRAY_VALUES = 2**27
"""The most values of one array in a reference's .npz file, checked from its header before it is read (2**27: 512
MiB as float32, 1 GiB as the curves' float64 copies); larger: keep fewer draws or rows (`--keep-draws`,
`--keep-rows`)."""
DRAW_ARRAYS = {"probs": ("f", 3), "chain": ("iu", 1), "rows": ("iu", 1)}
"""draw_probs.npz: {array: (dtype kinds, ndim)}; "rows" is optional."""
PREDICTIVE_ARRAYS = {"loc": ("f", 2), "scale": ("f", 2)}
"""predictive.npz: {array: (dtype kinds, ndim)}."""
ORDER_FACTOR = 0.5
"""The row-order check of per-draw probabilities (`check_draw_probs`): the mean TV between the draws' average and the
reference's probabilities on the rows the draws name must be at most ORDER_FACTOR × the mean TV between them on a
fixed random pairing of other rows (+ FLOAT16_STEP). Rows in order: the first is the Monte-Carlo error of the kept
draws, measured 0.0097 × the second at most on the committed references (mnist/mlp-linear, 100 of 600 draws on 2,000
rows) and 1e-5 × where every draw is kept; rows out of order (shifted by one, permuted): about 1 × (a pairing of
unrelated points). The midpoint ½ separates them."""
FLOAT16_STEP = 2.0**-10
"""Storage rounding of draw_probs.npz's float16 probabilities: at most 2**-11 relative to a value ≤ 1, so a row's
sum moves by at most 2**-11 ≈ 4.9e-4 (inside the row-sum tolerance ROW_SUM_ATOL = 1e-3; measured ≤ 4.0e-4 on the
committed references) and an average of them by as much; the order check allows twice that."""


_NPZ_ERRORS = (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error, NotImplementedError,
               RuntimeError)
"""What reading a damaged archive raises: truncated or not a zip (BadZipFile, EOFError), a corrupt deflate stream
(zlib.error), a bad CRC (BadZipFile), an unsupported compression (NotImplementedError) or an encrypted member
(RuntimeError), a bad .npy magic or header (ValueError), short data (ValueError / EOFError)."""


@contextlib.contextmanager
def _open_regular(path, where: str, error):
    """The file at `path` opened for reading, refused unless it is a regular file (a FIFO would hang the reader, a
    device never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise error(f"{where}: file not found") from None
    except OSError as e:
        raise error(f"{where}: cannot read ({e.strerror or one_line(e)})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error(f"{where}: not a regular file")
    with os.fdopen(fd, "rb") as f:
        yield f


def _npz_fail(where: str, e: BaseException, error):
    return error(f"{where}: not a readable .npz archive ({type(e).__name__}: {one_line(e) or 'no detail'})")


def _member_header(zf, info, where: str, error) -> tuple[tuple, np.dtype]:
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0)):
            raise error(f"{where}: array {info.filename!r} has .npy format version {version}, expected 1.0 or 2.0")
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
    return shape, dtype


def _check_header(name: str, shape: tuple, dtype: np.dtype, spec: tuple, where: str, error, max_values: int) -> None:
    kinds, ndim = spec
    if dtype.hasobject or dtype.kind not in kinds or dtype.fields is not None:
        want = {"f": "floating-point", "iu": "integer"}.get(kinds, kinds)
        raise error(f"{where}: array {name!r} has dtype {dtype}, expected {want}")
    if len(shape) != ndim:
        raise error(f"{where}: array {name!r} has shape {tuple(shape)}, expected {ndim} dimensions")
    if math.prod(shape) > max_values:
        raise error(f"{where}: array {name!r} of shape {tuple(shape)} holds more than {max_values:,} values (a "
                    "resource limit; keep fewer draws or rows)")


def npz_headers(path, where: str, arrays: dict, required: tuple, error,
                max_values: int = MAX_ARRAY_VALUES) -> dict[str, tuple[tuple, np.dtype]]:
    """The arrays of a .npz file, checked from their headers only (nothing is allocated): a regular file, a zip
    archive of .npy members, each named in `arrays` once, of the dtype kind and number of dimensions given there and at
    most `max_values` values; every name of `required` present.

    Args:
      path: the file; where: its name in messages; arrays: {name: (dtype kinds, ndim)}; required: names that must be
        there; error: the exception type raised; max_values: the most values of one array.
    Returns:
      {name: (shape, dtype)}.
    """
    try:
        with _open_regular(path, where, error) as f, zipfile.ZipFile(f) as zf:
            heads = {}
            for info in zf.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else None
                if name not in arrays or name in heads:
                    raise error(f"{where}: {'a second' if name in heads else 'unexpected'} member "
                                f"{info.filename!r} (expected arrays {', '.join(arrays)})")
                heads[name] = _member_header(zf, info, where, error)
                _check_header(name, *heads[name], arrays[name], where, error, max_values)
    except error:
        raise
    except _NPZ_ERRORS as e:
        raise _npz_fail(where, e, error) from None
    missing = [name for name in required if name not in heads]
    if missing:
        raise error(f"{where}: no array {missing[0]!r} (it needs {', '.join(required)})")
    return heads


def read_npz(path, where: str, arrays: dict, required: tuple, error, max_values: int = MAX_ARRAY_VALUES,
             check: Callable[[dict], None] | None = None) -> dict[str, np.ndarray]:
    """The arrays of a .npz file (`npz_headers` checked first; `check(headers)` may refuse on their shapes before
    anything is read); never unpickles.

    Returns:
      {name: array}.
    """
    heads = npz_headers(path, where, arrays, required, error, max_values)
    if check is not None:
        check(heads)
    try:
        with _open_regular(path, where, error) as f, zipfile.ZipFile(f) as zf:
            out = {}
            for name in heads:
                with zf.open(f"{name}.npy") as member:
                    out[name] = np.lib.format.read_array(member, allow_pickle=False)
    except error:
        raise
    except _NPZ_ERRORS as e:
        raise _npz_fail(where, e, error) from None
    for name, (shape, _) in heads.items():
        if out[name].shape != tuple(shape):
            raise error(f"{where}: array {name!r} changed while it was read")
    return out


def _check_probabilities(p: np.ndarray, where: str, error, atol: float) -> None:
    """Finite, in [0, 1], every (draw, row) summing to 1 within atol."""
    bad = ~np.isfinite(p)
    if bad.any():
        raise error(f"{where}: non-finite probability (draw {int(np.argwhere(bad)[0][0])})")
    if np.any(p < 0.0) or np.any(p > 1.0):
        d, r = np.argwhere((p < 0.0) | (p > 1.0))[0][:2]
        raise error(f"{where}: probabilities outside [0, 1] (first at draw {d}, row {r})")
    dev = np.abs(p.sum(axis=-1, dtype=np.float64) - 1.0)
    if np.any(dev > atol):
        d, r = np.argwhere(dev > atol)[0]
        raise error(f"{where}: probabilities do not sum to 1 (draw {d}, row {r} sums to {p[d, r].sum():.6g}; "
                    f"{int((dev > atol).sum())} rows off by more than {atol:g})")


def _check_rows(rows: np.ndarray | None, m: int, n: int, where: str, error) -> np.ndarray:
    """The test points the draws are on: `rows` (m increasing indices below n), or all n when rows is None."""
    if rows is None:
        if m != n:
            raise error(f"{where}: {m} test points and no 'rows', the reference has {n} (one per test example)")
        return np.arange(n)
    if rows.shape != (m,) or np.any(np.diff(rows.astype(np.int64)) <= 0) or (m and (rows[0] < 0 or rows[-1] >= n)):
        raise error(f"{where}: rows must be {m} increasing test-point indices in [0, {n}) (the reference's test "
                    f"order), got {rows.size} from {rows.min() if rows.size else '—'} to "
                    f"{rows.max() if rows.size else '—'}")
    return rows.astype(np.int64)


def _check_order(mean: np.ndarray, ref: np.ndarray, where: str, error) -> None:
    """The draws' average against the reference's probabilities on the same rows (ORDER_FACTOR)."""
    n = mean.shape[0]
    if n < 2:
        return
    pair = np.random.default_rng(0).permutation(n)
    own = float(np.mean(0.5 * np.abs(mean - ref).sum(axis=1)))
    other = float(np.mean(0.5 * np.abs(mean[pair] - ref[np.roll(pair, 1)]).sum(axis=1)))
    if not own <= ORDER_FACTOR * other + FLOAT16_STEP:
        raise error(f"{where}: the draws do not match the reference's probabilities on their rows (mean TV {own:.3f} "
                    f"between their average and probs.txt, {other:.3f} between unrelated rows): the rows are not in "
                    "the reference's test order")


def check_draw_probs(arrays: dict, where: str, error, probs: np.ndarray, atol: float, chains: int | None = None,
                     total: int | None = None) -> dict:
    """Check draw_probs.npz's arrays against the reference's own BMA probabilities.

    Args:
      arrays: "probs" (S, n', C), "chain" (S,), optional "rows" (n',); where: the file, for messages; error: the
        exception type raised; probs: the reference's checked probabilities (n, C), rows in its test order; atol: the
        row-sum tolerance; chains / total: the reference's NUTS chains and draws (metadata "sampler"; None: not
        checked).
    Returns:
      {"probs": (S, n', C) float32, "chain": (S,) int64, "rows": (n',) int64 or None}.
    """
    p, chain, rows = arrays["probs"], arrays["chain"], arrays.get("rows")
    s, m, c = p.shape
    n, classes = probs.shape
    if s < 2:
        raise error(f"{where}: {s} draw{'' if s == 1 else 's'}; the K-draw floors and the predictive variance need "
                    "at least 2")
    if total is not None and s > total:
        raise error(f"{where}: {s} draws, more than the {total} the reference's chains kept")
    if c != classes:
        raise error(f"{where}: {c} classes, the reference's probabilities have {classes}")
    at = _check_rows(rows, m, n, where, error)
    if chain.shape != (s,):
        raise error(f"{where}: chain holds {chain.size} values, expected one chain index per draw ({s})")
    if np.any(chain < 0) or (chains is not None and np.any(chain >= chains)):
        raise error(f"{where}: chain indices from {chain.min()} to {chain.max()}, expected indices in [0, "
                    f"{chains if chains is not None else 'the chains'})")
    p = p.astype(np.float32)
    _check_probabilities(p, where, error, atol)
    if np.all(p == p[:1]):
        raise error(f"{where}: every draw is the same (no spread: the K-draw floors would be 0)")
    _check_order(p.mean(axis=0, dtype=np.float64), np.asarray(probs, np.float64)[at], where, error)
    return {"probs": p, "chain": chain.astype(np.int64), "rows": None if rows is None else at}


def check_predictive(arrays: dict, where: str, error, test: int, min_draws: int = 1) -> dict:
    """Check predictive.npz's arrays: loc and scale (S, n) with n the test examples, finite, scale > 0, at least
    `min_draws` draws (2 for the curves: not all the same).

    Returns:
      {"loc", "scale": (S, n) float64}.
    """
    loc, scale = (np.asarray(arrays[k], np.float64) for k in ("loc", "scale"))
    if loc.shape != scale.shape:
        raise error(f"{where}: loc {loc.shape} and scale {scale.shape} must both be (S, n)")
    if loc.shape[1] != test:
        raise error(f"{where}: {loc.shape[1]} test columns, expected {test} (one per test example)")
    if loc.shape[0] < min_draws:
        raise error(f"{where}: {loc.shape[0]} draws, at least {min_draws} needed")
    if not (np.all(np.isfinite(loc)) and np.all(np.isfinite(scale))):
        raise error(f"{where}: non-finite loc or scale")
    if np.any(scale <= 0):
        raise error(f"{where}: non-positive scale")
    if min_draws > 1 and np.all(loc == loc[:1]) and np.all(scale == scale[:1]):
        raise error(f"{where}: every draw is the same (no spread: the K-draw floors would be 0)")
    return {"loc": loc, "scale": scale}
