"""Phase kernels (l2e.chains.freeze_phase, run_chain's chunk_at): a sampler that freezes its constants at one update
(Transient-L2E, preconditioned SGHMC) runs its burn-in, adaptation-window and window chunks with kernels specialised
to the phase — no per-update branch on the step — and the chunk holding the freeze with its general kernel. The chain is
the one the general kernel runs: the same samples to float32 rounding (the phase kernels compute the same
operations; only XLA's fusion may differ: ≤ 64 roundings of the largest coordinate), the same frozen constants
(rtol 1e-5) and kinetic energies (rtol 1e-4)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from l2e import precond_sghmc as P, transient as T
from l2e.chains import PHASES, ChainSchedule, adaptation_start, freeze_phase, make_chunk, run_chain

N, D, FREEZE, CHUNK = 100, 10, 40, 10
SD = np.geomspace(0.3, 3.0, D)


def posterior():
    return l2e.Posterior(lambda th, b: (0.5 * jnp.sum(th**2 / SD**2) + 0.3 * jnp.dot(jnp.mean(b, 0), th)) / N,
                         lambda th: jnp.zeros(()), N)


def transient_kernel(phase):
    kernel = T.build_kernel(posterior(), T.TransientConfig(freeze_step=FREEZE, base_step=1e-2), phase=phase)
    phi = T.init_meta_params(jax.random.PRNGKey(3), (8,), "random")
    return T.init, lambda k, s, b, a: kernel(k, s, b, phi), "inv_mass"


def precond_kernel(rule):
    def make(phase):
        kernel = P.build_kernel(posterior(), rule, FREEZE, 0.5, phase=phase)
        return P.init, lambda k, s, b, a: kernel(k, s, b, 0.3, 2.0), "inv_mass"

    return make


def test_freeze_phase():
    adapt = adaptation_start(FREEZE, 0.5)
    assert adapt == 20
    assert [freeze_phase(FREEZE, s, CHUNK, adapt) for s in (0, 10, 20, 30, 40, 50)] == [
        "burn_in", "burn_in", "adapt", "adapt", None, "window"]
    assert freeze_phase(FREEZE, 15, CHUNK, adapt) is None and freeze_phase(FREEZE, 35, CHUNK, adapt) is None
    assert [freeze_phase(FREEZE, s, CHUNK) for s in (0, 30, 40, 50)] == ["burn_in", "burn_in", None, "window"]
    assert T.chunk_phase(T.TransientConfig(freeze_step=FREEZE), 30, CHUNK) == "adapt"


@pytest.mark.parametrize("make", [transient_kernel, precond_kernel("fisher"), precond_kernel("rmsprop")],
                         ids=["transient", "precond_fisher", "precond_rmsprop"])
def test_phase_kernels_run_the_same_chain(make):
    schedule = ChainSchedule(num_steps=100, num_samples=5, thinning=10, batch_size=8, chunk=CHUNK)
    data = jax.random.normal(jax.random.PRNGKey(7), (64, D))

    def sample_batch(key, d, b):
        return d[jax.random.choice(key, d.shape[0], (b,))]

    fns = {}
    for phase in (None,) + PHASES:
        init, kernel, frozen = make(phase)
        fns[phase] = jax.jit(make_chunk(kernel, sample_batch, 8, CHUNK))
    state, key = init(jnp.full(D, 2.0)), jax.random.PRNGKey(1)
    whole = run_chain(fns[None], state, key, data, None, schedule)
    phased = run_chain(fns[None], state, key, data, None, schedule,
                       chunk_at=lambda start: fns[freeze_phase(FREEZE, start, CHUNK, adaptation_start(FREEZE, 0.5))])
    scale = float(np.max(np.abs(np.asarray(whole.samples))))
    np.testing.assert_allclose(np.asarray(phased.samples), np.asarray(whole.samples), rtol=0,
                               atol=64 * np.finfo(np.float32).eps * scale)
    np.testing.assert_allclose(np.asarray(getattr(phased.state, frozen)), np.asarray(getattr(whole.state, frozen)),
                               rtol=1e-5)
    np.testing.assert_allclose(phased.info.kinetic, whole.info.kinetic, rtol=1e-4, atol=1e-6)


def test_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="phase"):
        T.build_kernel(posterior(), T.TransientConfig(), phase="warm_up")
    with pytest.raises(ValueError, match="phase"):
        P.build_kernel(posterior(), "fisher", 10, phase="warm_up")


@pytest.mark.parametrize("execution", ["sequential", pytest.param("vmap", marks=pytest.mark.slow)])
def test_meta_training_fitness_is_unchanged_by_phase_kernels(monkeypatch, execution):
    """meta_train.es runs Transient-L2E's population with the phase kernels (meta_train.es.chunk_phase); its fitness
    and T_kin equal those of the general kernel (the registry entry with phase_of removed) to float32 rounding
    (rtol 1e-4, as the sequential and vmap executions are compared in tests/test_meta_train.py)."""
    import dataclasses

    from meta_train import PRESETS, apply_overrides, es
    from meta_train.es import evaluate_population, outer_keys
    from meta_train.train import initial_meta_params

    cfg = apply_overrides(PRESETS["transient"], ["objective.kind=bma", "objective.burn_in=20", "hidden=4",
                                                 "tasks=wine/mlp-16", "inner.thinning=4", "inner.num_samples=4",
                                                 "inner.num_steps=60", "inner.chunk=2"])
    phi = initial_meta_params(cfg)
    keys = outer_keys(cfg.seed, 0)
    pop = jax.tree.map(lambda x: jnp.stack([x + 0.05, x - 0.05]), phi)
    assert es.chunk_phase(cfg.sampler_config, cfg.schedule, 0) == "burn_in"

    def fitness():
        return evaluate_population(cfg.tasks.sample(keys.task), pop, keys, cfg.sampler_config, cfg.schedule,
                                   cfg.meta_loss_examples, objective="bma", log_temperature=True,
                                   execution=execution)

    phased = fitness()
    entry = es.sampler_module(cfg.sampler_config)
    general = dataclasses.replace(entry, protocol=dataclasses.replace(entry.protocol, phase_of=None))
    monkeypatch.setattr(es, "sampler_module", lambda sampler: general)
    whole = fitness()
    np.testing.assert_allclose(np.asarray(phased.fitness), np.asarray(whole.fitness), rtol=1e-4)
    np.testing.assert_allclose(phased.t_kin, whole.t_kin, rtol=1e-4)
