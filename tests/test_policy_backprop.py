"""Truncated backprop for Policy-L2E's meta-gradient (meta_train.policy_backprop).

- its forward pass is the meta-training's chain: the meta-loss equals population_program + population_losses for the
  same φ and key (same inits, minibatches and noise);
- its gradient is the truncated objective's: the directional derivative along random directions matches a central
  finite difference of the window's meta-loss from the same state at the freeze;
- at φ₀ (zero output layers) only the output layers get a gradient;
- a regression task is refused by the fidelity objective (the meta-loss in JAX is the classification one);
- the reference-free objective's kernel Stein discrepancy: its closed form equals the Stein kernel built by autodiff,
  and on a Gaussian exact draws score below shifted, narrowed and widened ones (200 draws);
- a run trains, resumes and refuses another configuration in its directory; a run of the window head alone keeps
  the mass head at φ₀ exactly, and the ES refuses such a subset.
"""
from __future__ import annotations

import dataclasses
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


def test_the_closed_form_ksd_is_the_stein_kernel_built_by_autodiff():
    from meta_train.policy_backprop import imq_ksd

    x = jax.random.normal(jax.random.PRNGKey(1), (4, 5))
    r2 = jnp.sum((x[:, None] - x[None]) ** 2, -1)
    c2 = jnp.median(r2[jnp.triu_indices(4, 1)])

    def k(a, b):
        return (c2 + jnp.sum((a - b) ** 2)) ** -0.5

    def kp(a, b):  # s = ∇log N(0, I) = −θ
        return (k(a, b) * (-a) @ (-b) + (-a) @ jax.grad(k, 1)(a, b) + (-b) @ jax.grad(k, 0)(a, b)
                + jnp.trace(jax.jacfwd(jax.grad(k, 0), 1)(a, b)))

    auto = np.mean([[float(kp(x[i], x[j])) for j in range(4)] for i in range(4)])
    assert float(imq_ksd(x, -x)) == pytest.approx(auto, rel=1e-4)


@pytest.mark.parametrize("d", [2, 50])
def test_ksd_ranks_exact_draws_of_a_gaussian_first(d):
    """200 draws of N(0, I): KSD² of exact draws below that of draws shifted by 0.5, scaled by 0.5 and by 2 (measured
    at d = 50: 0.023 against 0.90, 0.089, 0.066)."""
    from meta_train.policy_backprop import imq_ksd

    x = jax.random.normal(jax.random.PRNGKey(0), (200, d))
    exact = float(imq_ksd(x, -x))
    for y in (x + 0.5, 0.5 * x, 2.0 * x):
        assert exact < 0.5 * float(imq_ksd(y, -y))


def test_an_unknown_objective_is_refused():
    from meta_train.policy_backprop import window_program

    with pytest.raises(ValueError, match="objective"):
        window_program(None, P.PolicyConfig(), 2000, 10, 10, 64, objective="elbo")


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

    train(dataclasses.replace(cfg, generations=3), tmp_path / "run", runs=1, progress=lambda line: None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in rows if r["kind"] == "train"] == [0, 1, 2]
    with pytest.raises(ValueError, match="holds something else"):
        train(dataclasses.replace(cfg, chains=5), tmp_path / "run", runs=1)


def test_a_backprop_run_of_the_window_head_alone_keeps_the_rules_mass(tmp_path):
    """heads=("window",): after two generations the mass head is φ₀'s exactly (its output layer still zero: the
    rule's mass) while the window head moved; the ES, which perturbs every head, refuses the subset; a bad head
    name is refused."""
    from meta_train.policy_backprop import train
    from meta_train.policy_train import PolicyTrainConfig
    from meta_train.policy_train import train as train_es

    cfg = PolicyTrainConfig(reference=str(ROOT / "results" / "references"), tasks=(TASK,), tasks_per_generation=1,
                            generations=2, eval_every=2, heads=("window",))
    train(cfg, tmp_path / "run", runs=1, progress=lambda line: None)
    phi, phi0 = P.load_meta_params(tmp_path / "run" / "phi.npz"), P.init_meta_params(jax.random.PRNGKey(0), (16,))
    for a, b in zip(jax.tree.leaves(phi["mass"]), jax.tree.leaves(phi0["mass"])):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert float(jnp.abs(phi["window"]["Dense_1"]["bias"]).sum()) > 0
    with pytest.raises(ValueError, match="only meta_train.policy_backprop"):
        train_es(cfg, tmp_path / "es")
    assert not (tmp_path / "es").exists()
    with pytest.raises(ValueError, match="heads must be"):
        dataclasses.replace(cfg, heads=("mass", "step"))


@pytest.mark.slow
def test_the_ksd_objective_runs_on_the_window_and_its_gradient_matches_finite_differences(iris):
    """The reference-free objective: finite, and its directional derivative within 5 % of a central difference
    (measured 1 %: the median-heuristic bandwidth is held constant in the gradient, not in the difference)."""
    from jax import flatten_util

    from meta_train.policy_backprop import window_program

    phi0 = P.init_meta_params(jax.random.PRNGKey(0), (16,))
    key = jax.random.PRNGKey(3)
    run = window_program(iris, P.PolicyConfig(curvature="warm"), 2000, 10, 10, 64, objective="ksd")
    state = run.burn(phi0, key)
    loss, grad = run.window(phi0, state, key)
    flat, unravel = flatten_util.ravel_pytree(grad)
    d = jax.random.normal(jax.random.PRNGKey(0), flat.shape)
    d = d / jnp.linalg.norm(d)
    h, dt = 3e-3, unravel(d)
    up = run.window(jax.tree.map(lambda a, b: a + h * b, phi0, dt), state, key)[0]
    down = run.window(jax.tree.map(lambda a, b: a - h * b, phi0, dt), state, key)[0]
    assert np.isfinite(float(loss)) and float((up - down) / (2 * h)) == pytest.approx(float(flat @ d), rel=0.05)
