"""The L2E authors' released meta-parameters (`meta_params.pickle`; docs/samplers.md § The authors' released L2E).
The file is not part of the repository: `l2e.load_released(path)` takes its path.

The file is a pickle of a haiku `FlatMapping` of jax Arrays: `mlp/~/linear_{0,1,2}`, each with `w` (in, out)
and `b` (out,), float32, 9 → 32 → 32 → 2 (1,442 numbers).  A pickle can run arbitrary code, so it is read
with `ReleasedUnpickler`, which resolves exactly the five globals the file names and refuses every other:

    haiku._src.data_structures.FlatMapping → dict
    jax._src.array._reconstruct_array      → numpy array rebuilt from its pickled numpy state
    numpy.core.multiarray._reconstruct, numpy.ndarray, numpy.dtype → numpy's own

`load_released` returns our meta-parameters (flax `Dense_i` kernel/bias) and the sampler configuration of the
released code: output scales 1e-3, friction 0.1, lr (ε²·N) 0.5, and its noise N(0, 2·C·τ) with τ = 0.001 and
no ε factor (`L2EConfig(noise="reference", temperature=0.001)`); N is the user's posterior's data size.
"""
from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

try:  # numpy ≥ 2 renamed numpy.core to numpy._core
    from numpy._core.multiarray import _reconstruct as _np_reconstruct
except ImportError:  # pragma: no cover
    from numpy.core.multiarray import _reconstruct as _np_reconstruct

from base.io import one_line, read_bounded
from l2e.l2e import L2EConfig
from l2e.types import PyTree

RELEASED_CONFIG = L2EConfig(learning_rate=0.5, friction=0.1, temperature=0.001, alpha_scale=1e-3,
                            beta_scale=1e-3, noise="reference")
"""The released code's sampler constants (docs/l2e.md § The step as the released code runs it; τ = 0.001 from the
checkpoint's config.yaml)."""

LAYER_SHAPES = (((9, 32), (32,)), ((32, 32), (32,)), ((32, 2), (2,)))


class ReleasedFormatError(ValueError):
    """A released-format pickle that is refused (foreign global) or does not hold the expected arrays."""


def _reconstruct_array(fun, args, arr_state, aval_state):
    """jax's array pickling hook: the array is `fun(*args)` given numpy state `arr_state`; aval_state is ignored."""
    del aval_state
    if fun is not _np_reconstruct or not (isinstance(args, tuple) and args[:1] == (np.ndarray,)):
        raise ReleasedFormatError("array reconstruction with an unexpected constructor")
    arr = fun(*args)
    arr.__setstate__(arr_state)
    return np.asarray(arr)


def _flat_mapping(items=None):
    return dict(items or {})


class ReleasedUnpickler(pickle.Unpickler):
    """An Unpickler that maps the released file's five globals and refuses any other (ReleasedFormatError)."""

    ALLOWED = {
        ("haiku._src.data_structures", "FlatMapping"): _flat_mapping,
        ("jax._src.array", "_reconstruct_array"): _reconstruct_array,
        ("numpy.core.multiarray", "_reconstruct"): _np_reconstruct,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }

    def find_class(self, module: str, name: str):
        """The object a global of the pickle names.

        Args:
          module: the global's module.
          name: the global's name.
        Returns:
          the allowed replacement (ALLOWED).
        Raises:
          ReleasedFormatError: any other global.
        """
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise ReleasedFormatError(f"refused global {module}.{name} (not one of the released file's)") from None


def _keys(value, where: str) -> list[str]:
    """The sorted keys of a dict of the pickle (ReleasedFormatError for another type or a key that is not a string:
    the restricted unpickler lets plain containers of any keys through)."""
    if not isinstance(value, dict):
        raise ReleasedFormatError(f"{where}: expected a dict, got {type(value).__name__}")
    if not all(isinstance(k, str) for k in value):
        bad = next(k for k in value if not isinstance(k, str))
        raise ReleasedFormatError(f"{where}: a key that is not a string ({type(bad).__name__} {str(bad)[:40]!r})")
    return sorted(value)


MAX_RELEASED_BYTES = 2**20
"""The largest released-format pickle read (the authors' file: about 6 kB)."""


def released_meta_params(raw) -> PyTree:
    """Our meta-parameter tree from the released one.

    Args:
      raw: the unpickled {"mlp/~/linear_i": {"w", "b"}} (i = 0, 1, 2).
    Returns:
      {"Dense_i": {"kernel", "bias"}}, float32 numpy, 9 → 32 → 32 → 2.
    Raises:
      ReleasedFormatError: other keys, shapes or dtypes, or non-finite values.
    """
    if _keys(raw, "the pickle") != [f"mlp/~/linear_{i}" for i in range(3)]:
        raise ReleasedFormatError(f"expected keys mlp/~/linear_0..2, got {_keys(raw, 'the pickle')}")
    params = {}
    for i, (w_shape, b_shape) in enumerate(LAYER_SHAPES):
        layer = raw[f"mlp/~/linear_{i}"]
        if _keys(layer, f"layer linear_{i}") != ["b", "w"] or not all(isinstance(layer[k], np.ndarray)
                                                                     for k in ("w", "b")):
            raise ReleasedFormatError(f"layer linear_{i}: expected arrays w and b")
        w, b = (np.asarray(layer[k]) for k in ("w", "b"))
        if w.shape != w_shape or b.shape != b_shape or w.dtype != np.float32 or b.dtype != np.float32:
            raise ReleasedFormatError(f"layer linear_{i}: shapes {w.shape}/{b.shape} ({w.dtype}), expected "
                                      f"{w_shape}/{b_shape} float32")
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
            raise ReleasedFormatError(f"layer linear_{i}: non-finite values")
        params[f"Dense_{i}"] = {"kernel": w, "bias": b}
    return params


def load_released(path: str | Path) -> tuple[PyTree, L2EConfig]:
    """The authors' released meta-parameters and the released code's sampler constants (`l2e.load_released`).

    Use them with `l2e.l2e(posterior, meta_params, config)`.

    Args:
      path: the authors' `meta_params.pickle`, or a directory holding it.
    Returns:
      (meta_params: {"Dense_i": {"kernel", "bias"}} float32 numpy, 9 → 32 → 32 → 2; RELEASED_CONFIG: the
      L2EConfig with lr 0.5 (ε²·N), friction 0.1, T = 0.001, output scales 1e-3, noise "reference").
    Raises:
      FileNotFoundError: a missing file; ReleasedFormatError: a refused or malformed pickle.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "meta_params.pickle"
    try:
        data = read_bounded(path, MAX_RELEASED_BYTES)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise ReleasedFormatError(f"{path}: cannot read it ({e.strerror or type(e).__name__})") from None
    try:
        raw = ReleasedUnpickler(io.BytesIO(data)).load()
    except ReleasedFormatError as e:
        raise ReleasedFormatError(f"{path}: {e}") from None
    except Exception as e:  # truncated or corrupt pickles raise many types
        raise ReleasedFormatError(f"{path}: not a readable pickle ({type(e).__name__}: {one_line(e)})") from None
    try:
        return released_meta_params(raw), RELEASED_CONFIG
    except ReleasedFormatError as e:
        raise ReleasedFormatError(f"{path}: {e}") from None
