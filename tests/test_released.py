"""`l2e.released.load_released`: the L2E authors' meta_params.pickle through the restricted unpickler."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from l2e.released import RELEASED_CONFIG, ReleasedFormatError, load_released

from conftest import DATA_DIR

RELEASED = DATA_DIR / "l2e_released"


class _Evil:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _numpy1_pickle(tree) -> bytes:
    """`tree` pickled (protocol 3: no frames) as numpy 1 names its array reconstructor, like the released file."""
    return pickle.dumps(tree, protocol=3).replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")


@pytest.mark.skipif(not RELEASED.is_dir(), reason=f"released meta-parameters not found at {RELEASED}")
def test_real_released_file_loads_with_its_shapes():
    params, config = load_released(RELEASED)
    shapes = {k: (v["kernel"].shape, v["bias"].shape) for k, v in params.items()}
    assert shapes == {"Dense_0": ((9, 32), (32,)), "Dense_1": ((32, 32), (32,)), "Dense_2": ((32, 2), (2,))}
    assert sum(a.size for layer in params.values() for a in layer.values()) == 1442
    assert all(a.dtype == np.float32 and np.all(np.isfinite(a)) for layer in params.values() for a in layer.values())
    assert config == RELEASED_CONFIG
    assert (config.noise, config.temperature, config.friction, config.learning_rate) == ("reference", 0.001, 0.1, 0.5)
    assert config.alpha_scale == config.beta_scale == 1e-3


def test_malicious_pickle_is_refused_and_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    bad = tmp_path / "meta_params.pickle"
    bad.write_bytes(pickle.dumps(_Evil(marker)))
    with pytest.raises(ReleasedFormatError, match="refused global"):
        load_released(bad)
    assert not marker.exists()


def test_pickle_carrying_another_global_is_refused(tmp_path):
    import collections

    bad = tmp_path / "meta_params.pickle"
    bad.write_bytes(pickle.dumps(collections.OrderedDict(a=1)))
    with pytest.raises(ReleasedFormatError, match="collections.OrderedDict"):
        load_released(bad)


def test_wrong_shapes_and_truncation_are_refused(tmp_path):
    f = tmp_path / "meta_params.pickle"
    layers = {f"mlp/~/linear_{i}": {"w": np.zeros((3, 3), np.float32), "b": np.zeros(3, np.float32)} for i in range(3)}
    f.write_bytes(_numpy1_pickle(layers))  # only the allowed numpy globals: it unpickles, then fails the shapes
    with pytest.raises(ReleasedFormatError, match="linear_0: shapes"):
        load_released(f)
    if RELEASED.is_dir():
        f.write_bytes((RELEASED / "meta_params.pickle").read_bytes()[:1000])
        with pytest.raises(ReleasedFormatError, match="not a readable pickle"):
            load_released(f)
