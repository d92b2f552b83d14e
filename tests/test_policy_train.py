"""Meta-training Policy-L2E (meta_train.policy_task, meta_train.policy_train).

- the meta-loss: log(TV/TV_K) for draws whose dispersion is in the band and whose T_kin is at T; the dispersion
  and temperature penalties add where they leave their bands; a member with a non-finite draw scores DIVERGED;
- the configuration refuses a task of the held-out half (meta-training reads the training half only);
- a run writes its meta-loss plot; it resumes and may be extended: one generation, then a call for two, logs the
  fitness of a two-generation run; a run directory whose config.json predates max_step_gain resumes
  in one call (slow: it compiles a task); another configuration in the same directory is refused;
- with track_every 5 a population's chunks run each phase's periodic kernels and give the general kernel's chains.
"""
from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest

from meta_train.policy_task import DIVERGED, PolicyTask, population_losses
from meta_train.policy_train import PolicyTrainConfig, main, train


def _task(ref, ref_var=0.01, floor=0.05, band=(0.8, 1.2), likelihood=None):
    return PolicyTask("t", None, jnp.zeros((ref.shape[1], 1)), ref, ref_var, floor, band, likelihood)


def test_meta_loss_terms():
    rng = np.random.default_rng(0)
    ref = np.log(np.full((3, 4, 2), 0.5))  # reference draws' log-probabilities: BMA 0.5 everywhere
    probs = np.clip(0.5 + 0.1 * rng.normal(size=(3, 10, 4, 1)), 0.01, 0.99)
    probs = np.concatenate([probs, 1 - probs], axis=-1)
    var = float(np.mean(np.var(probs[0], axis=0, ddof=1)))
    pt = _task(ref, ref_var=var)
    probs[2, 0, 0, 0] = np.nan
    loss, stats = population_losses(pt, np.log(probs), np.array([1.0, 1.5, 1.0]))
    tv = np.mean(0.5 * np.sum(np.abs(probs[0].mean(0) - 0.5), axis=-1))
    assert loss[0] == pytest.approx(np.log(tv / 0.05)) and stats["var_ratio"][0] == pytest.approx(1.0)
    assert loss[1] > np.log(stats["tv_ratio"][1]) + 0.39  # T_kin 1.5: penalty 0.4
    assert loss[2] == DIVERGED
    wide = _task(ref, ref_var=var / 4)  # the draws 4 × the reference's variance: log(4 / 1.2) added
    assert population_losses(wide, np.log(probs[:1]), np.ones(1))[0][0] == pytest.approx(
        np.log(tv / 0.05) + np.log(4 / 1.2))


def test_regression_meta_loss_reads_the_gaussian_mixture():
    """Regression outputs [loc, scale]: the TV is the likelihood's mixture TV (a draw set equal to the reference's
    scores TV 0), the variance ratio that of the predicted means, and a shifted set pays."""
    from tasks.likelihoods import likelihood_of

    lik = likelihood_of("regression")
    rng = np.random.default_rng(1)
    ref = np.stack([rng.normal(size=(40, 6)), np.full((40, 6), 0.5)], axis=-1)
    var = float(np.mean(np.var(ref[..., 0], axis=0, ddof=1)))
    pt = _task(ref, ref_var=var, floor=0.1, band=(0.5, 2.0), likelihood=lik)
    shifted = ref.copy()
    shifted[..., 0] += 1.0
    loss, stats = population_losses(pt, np.stack([ref, shifted]), np.ones(2))
    assert stats["tv_ratio"][0] == pytest.approx(0.0, abs=1e-9) and stats["var_ratio"][0] == pytest.approx(1.0)
    assert stats["tv_ratio"][1] == pytest.approx(lik.bma_total_variation(shifted, ref) / 0.1) and loss[1] > 0.5


def test_configuration_refuses_the_held_out_half(capsys):
    with pytest.raises(ValueError, match="outside the zoo's meta-training half"):
        PolicyTrainConfig(tasks=("digits/mlp-32",))
    assert main(["--output", "x", "--set", "tasks=digits/mlp-32"]) == 2
    assert capsys.readouterr().err.startswith("error: tasks outside")


@pytest.mark.slow
def test_run_resumes_and_refuses_another_configuration(tmp_path):
    config = PolicyTrainConfig(tasks=("wine/mlp-16",), budgets=(500,), population=2, generations=1,
                               tasks_per_generation=1, eval_every=5)
    train(config, tmp_path / "run", progress=lambda s: None)
    assert (tmp_path / "run" / "meta_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="another configuration"):
        train(PolicyTrainConfig(tasks=("wine/mlp-16",), budgets=(1000,), population=2, generations=1,
                                tasks_per_generation=1), tmp_path / "run")
    import dataclasses

    train(dataclasses.replace(config, generations=2), tmp_path / "run2", progress=lambda s: None)
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    del stored["max_step_gain"]  # a run made before the field existed resumes at the field's default
    (tmp_path / "run" / "config.json").write_text(json.dumps(stored))
    train(dataclasses.replace(config, generations=2), tmp_path / "run", progress=lambda s: None)
    rows = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    again = [json.loads(x) for x in (tmp_path / "run2" / "log.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in rows if r["kind"] == "train"] == [0, 1]
    assert [r["fitness_mean"] for r in rows if r["kind"] == "train"] == [
        r["fitness_mean"] for r in again if r["kind"] == "train"]


@pytest.mark.slow
def test_a_populations_tracked_chunks_run_the_periodic_kernels(monkeypatch):
    """With track_every 5, a population's chunks run their phase's 5 kernels (l2e.policy.chunk_kernels), none
    branching on the refresh; two copies of φ give the single φ's outputs (the general kernel's chains) to float32
    rounding over 50 updates per chain: log-probabilities within 2e-3 (measured 1.3e-4; 2e-5 without the tracking).
    Over 200 updates the rounding grows through the adaptation points as without the tracking (measured up to 2.1
    on a few outputs, median 2e-4, with none of the periodic kernels), so the test keeps the chain short."""
    from pathlib import Path

    import jax

    from l2e import policy as P
    from meta_train.policy_task import load_policy_task, population_program

    pt = load_policy_task("wine/mlp-16", str(Path(__file__).resolve().parents[1] / "results" / "references"), 10, 0)
    cfg = P.PolicyConfig(curvature="warm", track_noise=True, track_every=5)
    sizes, real = [], P.chunk_kernels

    def spy(*args):
        kernels = real(*args)
        sizes.append(len(kernels))
        return kernels

    monkeypatch.setattr(P, "chunk_kernels", spy)
    run = population_program(pt, cfg, 500, 10, 10, 64)
    phi, key = P.init_meta_params(jax.random.PRNGKey(3), start="random"), jax.random.PRNGKey(1)
    one, t_one = run(jax.tree.map(lambda v: v[None], phi), key)
    two, t_two = run(jax.tree.map(lambda v: jnp.stack([v, v]), phi), key)
    assert sizes.count(1) == 1 and sizes.count(5) == len(sizes) - 1 >= 1  # the general kernel once, phases periodic
    assert np.all(np.isfinite(one))
    for out, t_kin in ((two[0], t_two[0]), (two[1], t_two[1])):
        np.testing.assert_allclose(out, one[0], rtol=0, atol=2e-3)
        assert t_kin == pytest.approx(t_one[0], rel=1e-3)
