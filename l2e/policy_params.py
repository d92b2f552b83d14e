"""Policy-L2E's meta-parameters φ (l2e.policy): the two policy networks, their φ₀, checks, and an .npz file format
(re-exported by l2e.policy)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from l2e.meta_model import MetaMLP, check_stack, mlp_layers_names
from l2e.policy_features import COORD_FEATURES, GLOBAL_FEATURES
from l2e.types import PyTree

__all__ = ["check_meta_params", "init_meta_params", "load_meta_params", "save_meta_params"]


def init_meta_params(key: jax.Array, hidden: Sequence[int] = (16,), start: str = "rule") -> PyTree:
    """φ = {"mass": a Dense stack |COORD_FEATURES| + |GLOBAL_FEATURES| → hidden → 1, "window": |GLOBAL_FEATURES| →
    hidden → 2}; start "rule": both output layers 0 (the hand-designed rule exactly), "random": all random."""
    if start not in ("rule", "random"):
        raise ValueError(f"start must be 'rule' or 'random', got {start!r}")
    k_mass, k_window = jax.random.split(key)
    n_c, n_g = len(COORD_FEATURES), len(GLOBAL_FEATURES)
    phi = {"mass": MetaMLP(tuple(hidden), outputs=1).init(k_mass, jnp.zeros((1, n_c + n_g)))["params"],
           "window": MetaMLP(tuple(hidden), outputs=2).init(k_window, jnp.zeros((1, n_g)))["params"]}
    if start == "rule":
        phi = {head: {**p, mlp_layers_names(p)[-1]: jax.tree.map(jnp.zeros_like, p[mlp_layers_names(p)[-1]])}
               for head, p in phi.items()}
    return phi


def check_meta_params(tree: Any, where: str) -> PyTree:
    """A restored φ checked (ValueError naming `where`): the two Dense stacks of `init_meta_params`, finite."""
    n_c, n_g = len(COORD_FEATURES), len(GLOBAL_FEATURES)
    if not isinstance(tree, dict) or sorted(tree) != ["mass", "window"]:
        raise ValueError(f"{where}: not a Policy-L2E meta-parameter tree (expected heads mass, window)")
    return {"mass": check_stack(tree["mass"], f"{where} (mass)", n_c + n_g, 1),
            "window": check_stack(tree["window"], f"{where} (window)", n_g, 2)}


def save_meta_params(path, meta_params: PyTree) -> None:
    """Write φ to `path` (.npz, one array per leaf under its "/"-joined key path)."""
    flat = {"/".join(str(k.key) for k in kp): np.asarray(v, np.float32)
            for kp, v in jax.tree_util.tree_leaves_with_path(check_meta_params(meta_params, "meta_params"))}
    with open(path, "wb") as f:
        np.savez(f, **flat)


def load_meta_params(path) -> PyTree:
    """φ read back from `save_meta_params`' file and checked (ValueError naming the file otherwise); "shipped": the
    shipped checkpoint, checkpoints/policy/phi.npz (meta-trained by `python -m meta_train.policy_train`)."""
    if str(path) == "shipped":
        import checkpoints

        path = Path(checkpoints.__file__).parent / "policy" / "phi.npz"
    tree: dict = {}
    with np.load(path, allow_pickle=False) as z:
        for name in z.files:
            node = tree
            *heads, leaf = name.split("/")
            for h in heads:
                node = node.setdefault(h, {})
            node[leaf] = z[name]
    return check_meta_params(tree, str(path))
