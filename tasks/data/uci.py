"""Regression data: UCI benchmark loaders (standard Gal & Ghahramani splits or the MILE protocol) and the 1-D
"in-between uncertainty" toy problem, as standardised `RegressionData`.

Data format of a UCI folder (uci/<name>/ of the data root, Hernandez-Lobato & Adams 2015 splits): `data.txt` holds
whitespace-separated numbers, one row per example; `index_features.txt` / `index_target.txt` hold 0-based column
indices; `index_train_<k>.txt` / `index_test_<k>.txt` hold 0-based row indices of split k.

Protocols (all metrics are on the standardised target scale):
  "standard": split k's train/test rows; the last 10 % of the train indices (in file order) are the validation
      set; x and y are z-scored with the statistics of the remaining training rows.
  "mile": MILE (Sommer et al. 2025, docs/data.md, UCI regression sets): z-score every column, target included,
      with whole-data statistics; shuffle rows with np.random.default_rng(seed); contiguous split
      floor(0.7 n) train / floor(0.1 n) validation / rest test.  Split index files are not used.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tasks.data.base import DatasetError, check_finite, default_dir

UCI_DATASETS = (
    "bostonHousing", "concrete", "energy", "kin8nm", "naval-propulsion-plant", "power-plant",
    "protein-tertiary-structure", "wine-quality-red", "yacht",
)
"""The UCI sets this project uses (airfoil, used by MILE, is not available)."""
PROTOCOLS = ("standard", "mile")


@dataclass(frozen=True)
class RegressionData:
    """Standardised regression splits: x_* float32 (n, features), y_* float32 (n,); arrays are read-only.

    x_mean / x_std (features,) and y_mean / y_std (scalars) are the z-score statistics applied (raw = z·std +
    mean); identity (0 / 1) for the synthetic set.  `split` is the UCI split index ("standard"), `seed` the
    shuffle seed ("mile") or the generator seed ("synthetic").
    """

    name: str
    protocol: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_valid: np.ndarray
    y_valid: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_mean: np.ndarray = field(repr=False)
    x_std: np.ndarray = field(repr=False)
    y_mean: float = 0.0
    y_std: float = 1.0
    split: int | None = None
    seed: int | None = None

    def __post_init__(self):
        for s in ("train", "valid", "test"):
            x, y = getattr(self, f"x_{s}"), getattr(self, f"y_{s}")
            if x.ndim != 2 or y.ndim != 1 or len(x) != len(y):
                raise DatasetError(f"{self.name}: {s} needs x (n, d) and y (n,), got {x.shape} and {y.shape}")
            if len(x) == 0:
                raise DatasetError(f"{self.name}: empty {s} split")
            check_finite(x, f"{self.name}: {s} inputs")
            check_finite(y, f"{self.name}: {s} targets")
            x.flags.writeable = False
            y.flags.writeable = False

    @property
    def num_features(self) -> int:
        return int(self.x_train.shape[1])

    def __repr__(self) -> str:
        return (f"RegressionData({self.name}, {self.protocol}, train={len(self.y_train)}, "
                f"valid={len(self.y_valid)}, test={len(self.y_test)}, features={self.num_features})")


# ----------------------------------------------------------------------------- file readers


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: unreadable ({type(e).__name__}: {e})") from None


def _read_matrix(path: Path) -> np.ndarray:
    """Whitespace-separated float rows → float64 (rows, cols); ragged / non-numeric / non-finite → DatasetError."""
    rows = [(i, line.split()) for i, line in enumerate(_read_text(path).splitlines(), 1) if line.strip()]
    if not rows:
        raise DatasetError(f"{path}: no data rows")
    width = len(rows[0][1])
    for lineno, tokens in rows:
        if len(tokens) != width:
            raise DatasetError(f"{path}: ragged rows: line {lineno} has {len(tokens)} values, line "
                               f"{rows[0][0]} has {width}")
    try:
        a = np.array([t for _, t in rows], dtype=np.float64)
    except ValueError:
        for lineno, tokens in rows:
            for tok in tokens:
                try:
                    float(tok)
                except ValueError:
                    raise DatasetError(f"{path}: non-numeric value {tok!r} on line {lineno}") from None
        raise  # pragma: no cover - np.array failed on values that float() accepts
    if not np.all(np.isfinite(a)):
        r = int(np.argwhere(~np.isfinite(a))[0, 0])
        raise DatasetError(f"{path}: non-finite value on line {rows[r][0]}")
    return a


def _read_indices(path: Path, bound: int, what: str) -> np.ndarray:
    """Whitespace-separated 0-based integer indices → int64 (n,), each in [0, bound)."""
    tokens = _read_text(path).split()
    if not tokens:
        raise DatasetError(f"{path}: no indices")
    try:
        vals = [float(t) for t in tokens]
    except ValueError:
        bad = next(t for t in tokens if not _is_float(t))
        raise DatasetError(f"{path}: non-numeric index {bad!r}") from None
    idx = np.asarray(vals)
    if not np.all(idx == np.round(idx)):
        raise DatasetError(f"{path}: non-integer index {tokens[int(np.argmax(idx != np.round(idx)))]!r}")
    idx = idx.astype(np.int64)
    out = (idx < 0) | (idx >= bound)
    if out.any():
        raise DatasetError(f"{path}: {what} index {int(idx[out][0])} out of range [0, {bound})")
    if len(np.unique(idx)) != len(idx):
        raise DatasetError(f"{path}: duplicate {what} indices")
    return idx


def _is_float(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _uci_dir(name: str, data_dir: str | os.PathLike | None) -> Path:
    """data_dir/<name>, or data_dir itself when it holds data.txt (and no <name> folder); without data_dir
    $L2E_DATA_DIR/uci/<name>, else ~/.cache/l2e/uci/<name> (tasks.data.base.default_dir)."""
    if data_dir is None:
        return default_dir(f"uci/{name}")
    data_dir = Path(data_dir)
    d = data_dir if (data_dir / "data.txt").is_file() and not (data_dir / name).is_dir() else data_dir / name
    if not d.is_dir():
        raise DatasetError(f"{d}: UCI dataset directory {name!r} not found")
    return d


def _zscore_stats(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu, sd = a.mean(0), a.std(0)
    return mu, np.where(sd > 0, sd, 1.0)


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


# ----------------------------------------------------------------------------- loaders


def load_uci(name: str, data_dir: str | os.PathLike | None = None, split: int = 0, protocol: str = "standard",
             seed: int = 1) -> RegressionData:
    """Load UCI regression set `name` (a folder of data_dir; see the module docstring for the two protocols).

    split: index k of index_train_k / index_test_k ("standard"); seed: shuffle seed ("mile", seeds 1–3 in MILE).
    Any missing or malformed file, bad split or out-of-range index raises a one-line DatasetError.
    """
    if protocol not in PROTOCOLS:
        raise DatasetError(f"{name}: protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    d = _uci_dir(name, data_dir)
    if isinstance(split, bool) or not isinstance(split, (int, np.integer)) or split < 0:
        raise DatasetError(f"{d}: split must be a non-negative integer, got {split!r}")
    data = _read_matrix(d / "data.txt")
    n, cols = data.shape
    feats = _read_indices(d / "index_features.txt", cols, "column")
    target = _read_indices(d / "index_target.txt", cols, "column")
    if len(target) != 1:
        raise DatasetError(f"{d / 'index_target.txt'}: expected one target column, got {len(target)}")
    if int(target[0]) in set(feats.tolist()):
        raise DatasetError(f"{d / 'index_target.txt'}: target column {int(target[0])} is also a feature column")
    x, y = data[:, feats], data[:, int(target[0])]

    if protocol == "mile":
        x_mu, x_sd = _zscore_stats(x)
        y_mu, y_sd = _zscore_stats(y)
        perm = np.random.default_rng(seed).permutation(n)
        a, b = int(0.7 * n), int(0.7 * n) + int(0.1 * n)
        if not 0 < a < b < n:
            raise DatasetError(f"{d / 'data.txt'}: {n} rows are too few for a 70/10/20 split")
        tr, va, te = perm[:a], perm[a:b], perm[b:]
        split_out, seed_out = None, int(seed)
    else:
        f_tr, f_te = d / f"index_train_{split}.txt", d / f"index_test_{split}.txt"
        for f in (f_tr, f_te):
            if not f.is_file():
                have = sorted(int(p.stem.rsplit("_", 1)[1]) for p in d.glob("index_train_*.txt")
                              if p.stem.rsplit("_", 1)[1].isdigit())
                avail = f"splits {have[0]}-{have[-1]}" if have else "no splits"
                raise DatasetError(f"{f}: split {split} not found ({name} has {avail})")
        idx_tr, te = _read_indices(f_tr, n, "row"), _read_indices(f_te, n, "row")
        if np.intersect1d(idx_tr, te).size:
            raise DatasetError(f"{f_te}: test rows overlap the train rows of {f_tr.name}")
        n_va = max(1, round(0.1 * len(idx_tr)))
        if len(idx_tr) - n_va < 1:
            raise DatasetError(f"{f_tr}: {len(idx_tr)} train rows are too few to hold out a validation set")
        tr, va = idx_tr[:-n_va], idx_tr[-n_va:]
        x_mu, x_sd = _zscore_stats(x[tr])
        y_mu, y_sd = _zscore_stats(y[tr])
        split_out, seed_out = int(split), None

    zx = (x - x_mu) / x_sd
    zy = (y - y_mu) / y_sd
    return RegressionData(
        name, protocol, _f32(zx[tr]), _f32(zy[tr]), _f32(zx[va]), _f32(zy[va]), _f32(zx[te]), _f32(zy[te]),
        x_mu.astype(np.float64), x_sd.astype(np.float64), float(y_mu), float(y_sd), split_out, seed_out,
    )


def synthetic_1d_function(x: np.ndarray) -> np.ndarray:
    """The noiseless target of `synthetic_1d`: f(x) = cos(4x + 0.8)."""
    return np.cos(4.0 * np.asarray(x) + 0.8)


def synthetic_1d(num_points: int = 1000, seed: int = 0, noise_std: float = 0.1) -> RegressionData:
    """1-D "in-between uncertainty" regression (Foong et al. 2019 style; the L2E paper's 1-D experiment).

    Train: `num_points` inputs, half from U(-1, -0.5), half from U(0.5, 1) (a gap on (-0.5, 0.5));
    y = f(x) + N(0, noise_std²) with f = `synthetic_1d_function`.  Valid: num_points // 10 more points from the
    same two clusters.  Test: 400 points on an even grid over [-2, 2] (the gap and beyond the data), with noise.
    No standardisation (x_mean 0, x_std 1).  Deterministic in (num_points, seed, noise_std).
    """
    if num_points < 2:
        raise DatasetError(f"synthetic_1d: num_points must be >= 2, got {num_points}")
    rng = np.random.default_rng(seed)

    def clusters(n):
        left = rng.uniform(-1.0, -0.5, n // 2)
        right = rng.uniform(0.5, 1.0, n - n // 2)
        return np.concatenate([left, right])

    x_tr = clusters(num_points)
    x_va = clusters(max(2, num_points // 10))
    x_te = np.linspace(-2.0, 2.0, 400)
    noisy = lambda x: synthetic_1d_function(x) + noise_std * rng.standard_normal(x.shape)  # noqa: E731
    y_tr, y_va, y_te = noisy(x_tr), noisy(x_va), noisy(x_te)
    col = lambda a: _f32(a[:, None])  # noqa: E731
    return RegressionData("synthetic_1d", "synthetic", col(x_tr), _f32(y_tr), col(x_va), _f32(y_va), col(x_te),
                          _f32(y_te), np.zeros(1), np.ones(1), 0.0, 1.0, None, int(seed))
