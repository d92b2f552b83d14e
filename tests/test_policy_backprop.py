"""Truncated backprop for Policy-L2E's meta-gradient (meta_train.policy_backprop).

- its forward pass is the meta-training's chain: the meta-loss equals population_program + population_losses for the
  same φ and key (same inits, minibatches and noise);
- its gradient is the truncated objective's: the directional derivative along random directions matches a central
  finite difference of the window's meta-loss from the same state at the freeze;
- at φ₀ (zero output layers) only the output layers get a gradient;
- a regression task is refused (the meta-loss in JAX is the classification one);
- a run trains, resumes and refuses another configuration in its directory.
"""
from __future__ import annotations

import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from l2e import policy as P

TASK = "iris/mlp-8-tanh"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def iris():
    from meta_train.policy_task import load_policy_task

    return load_policy_task(TASK, str(ROOT / "results" / "references"), 10, 0)


def test_a_regression_task_is_refused():
    from meta_train.policy_backprop import window_program

    pt = types.SimpleNamespace(name="r", task=types.SimpleNamespace(likelihood=types.SimpleNamespace(
        has_class_probs=False)))
    with pytest.raises(ValueError, match="classification"):
        window_program(pt, P.PolicyConfig(), 2000, 10, 10, 64)


@pytest.mark.slow
def test_forward_is_the_meta_training_chain_and_the_gradient_is_the_truncated_objectives(iris):
    from jax import flatten_util

    from meta_train.policy_backprop import _output_mask, window_program
    from meta_train.policy_task import population_losses, population_program

    cfg = P.PolicyConfig(curvature="warm")
    phi0 = P.init_meta_params(jax.random.PRNGKey(0), (16,))
    key = jax.random.PRNGKey(3)
    run = window_program(iris, cfg, 2000, 10, 10, 64)
    state = run.burn(phi0, key)
    loss, grad = run.window(phi0, state, key)
    out, t_kin = population_program(iris, cfg, 2000, 10, 10, 64)(jax.tree.map(lambda v: v[None], phi0), key)
    # the same chain, compiled as one scan instead of unrolled chunks: float32 fusion differences only (measured 3e-7)
    assert float(loss) == pytest.approx(float(population_losses(iris, out, t_kin)[0][0]), abs=1e-3)
    flat, unravel = flatten_util.ravel_pytree(grad)
    flat = np.asarray(flat)
    assert np.all(flat[_output_mask(phi0) == 0] == 0) and np.linalg.norm(flat) > 0
    for seed in range(2):
        d = np.array(jax.random.normal(jax.random.PRNGKey(seed), flat.shape))
        d /= np.linalg.norm(d)
        h, dt = 3e-3, unravel(jnp.asarray(d))
        up = run.window(jax.tree.map(lambda a, b: a + h * b, phi0, dt), state, key)[0]
        down = run.window(jax.tree.map(lambda a, b: a - h * b, phi0, dt), state, key)[0]
        # measured: agreement to 0.02 % (h = 1e-3) and 0.05 % (h = 1e-2) along three directions
        assert float((up - down) / (2 * h)) == pytest.approx(float(flat @ d), rel=0.02, abs=1e-3)


@pytest.mark.slow
def test_a_backprop_run_trains_resumes_and_refuses_another_configuration(tmp_path):
    """Two generations on one task write the meta-loss curve (eval rows at 0 and 2), φ moves off φ₀; a call for
    three resumes at generation 2 (three train rows in all); another configuration in the directory is refused."""
    import json

    from meta_train.policy_backprop import train
    from meta_train.policy_train import PolicyTrainConfig

    cfg = PolicyTrainConfig(reference=str(ROOT / "results" / "references"), tasks=(TASK,), tasks_per_generation=1,
                            generations=2, eval_every=2)
    train(cfg, tmp_path / "run", runs=1, progress=lambda line: None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["generation"]) for r in rows] == [("eval", 0), ("train", 0), ("train", 1), ("eval", 2)]
    assert all(np.isfinite(r["loss"]) for r in rows if r["kind"] == "eval")
    phi = P.load_meta_params(tmp_path / "run" / "phi.npz")
    assert float(jnp.abs(phi["window"]["Dense_1"]["bias"]).sum()) > 0 and (tmp_path / "run" / "meta_loss.png").is_file()
    import dataclasses

    train(dataclasses.replace(cfg, generations=3), tmp_path / "run", runs=1, progress=lambda line: None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in rows if r["kind"] == "train"] == [0, 1, 2]
    with pytest.raises(ValueError, match="holds something else"):
        train(dataclasses.replace(cfg, chains=5), tmp_path / "run", runs=1)
