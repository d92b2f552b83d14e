"""Meta-training: determinism, exact resumption, checkpoints loadable as a sampler, bad input."""
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import l2e
from meta_train import PRESETS, ConfigError, RunDirError, apply_overrides, meta_train
from meta_train.config import from_dict

from conftest import ROOT, run_cli

SMOKE = apply_overrides(PRESETS["smoke"], ["num_outer=4", "checkpoint_every=2"])


def flat(tree):
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(tree)])


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    return out, meta_train(SMOKE, out, progress=False)


def test_smoke_run_writes_log_plot_and_checkpoints(full_run):
    out, summary = full_run
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    assert all(np.isfinite(r["meta_loss"]) and r["inner_seconds"] > 0 for r in rows)
    assert (out / "meta_loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["2", "4"]
    assert np.all(np.isfinite(flat(summary["meta_params"])))


def test_same_seed_same_numbers(full_run, tmp_path):
    out, summary = full_run
    again = meta_train(SMOKE, tmp_path / "again", progress=False)
    np.testing.assert_array_equal(flat(summary["meta_params"]), flat(again["meta_params"]))
    a = [r["meta_loss"] for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())]
    b = [r["meta_loss"] for r in map(json.loads, (tmp_path / "again" / "log.jsonl").read_text().splitlines())]
    assert a == b


def test_different_seed_different_numbers(full_run, tmp_path):
    _, summary = full_run
    other = meta_train(dataclasses.replace(SMOKE, seed=1), tmp_path / "other", progress=False)
    assert not np.array_equal(flat(summary["meta_params"]), flat(other["meta_params"]))


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted(full_run, tmp_path):
    _, summary = full_run
    out = tmp_path / "resumed"
    meta_train(SMOKE, out, progress=False, stop_after=3)  # checkpoint at 2, iteration 3 is lost
    resumed = meta_train(SMOKE, out, resume=True, progress=False)
    np.testing.assert_array_equal(flat(summary["meta_params"]), flat(resumed["meta_params"]))
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]


def test_checkpoint_loads_as_drop_in_sampler(full_run):
    out, summary = full_run
    params, config, meta = l2e.load_meta_params(out)
    assert meta["iteration"] == 4
    np.testing.assert_array_equal(flat(params), flat(summary["meta_params"]))
    assert config == SMOKE.sampler
    from tasks import build_task

    task = build_task(SMOKE.tasks.specs()[0])
    sampler = l2e.load_sampler(out, posterior=task.posterior)
    state = sampler.init(task.init_params(jax.random.PRNGKey(0)))
    batch = task.sample_batch(jax.random.PRNGKey(1), task.train_data, 16)
    state, info = jax.jit(sampler.step)(jax.random.PRNGKey(2), state, batch)
    assert np.all(np.isfinite(flat(state.position))) and bool(info.is_finite)


def test_existing_run_is_not_overwritten(full_run):
    out, _ = full_run
    before = (out / "log.jsonl").read_text()
    with pytest.raises(RunDirError, match="--resume"):
        meta_train(SMOKE, out, progress=False)
    with pytest.raises(RunDirError, match="config differs"):
        meta_train(dataclasses.replace(SMOKE, seed=5), out, resume=True, progress=False)
    assert (out / "log.jsonl").read_text() == before


def test_config_round_trip_and_overrides():
    cfg = apply_overrides(PRESETS["paper-form"], ["inner.num_steps=500", "es.sigma=0.02",
                                                "tasks.datasets=digits,synthetic_images", "sampler.noise=reference"])
    assert cfg.inner.num_steps == 500 and cfg.es.sigma == 0.02 and cfg.sampler.noise == "reference"
    assert from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="unknown config key: inner.bogus"):
        apply_overrides(cfg, ["inner.bogus=1"])
    with pytest.raises(ConfigError, match="population"):
        apply_overrides(cfg, ["es.population=3"])
    with pytest.raises(ConfigError, match="bad value"):
        apply_overrides(cfg, ["num_outer=ten"])


@pytest.mark.parametrize("args,msg", [
    (["--preset", "nope"], "unknown preset"),
    (["--preset", "smoke", "--set", "es.population=3"], "population"),
    (["--preset", "smoke", "--set", "sampler.learning_rate=-1"], "learning_rate"),
    (["--preset", "smoke", "--set", "tasks.datasets=imagenet"], "unknown dataset"),
    (["--preset", "smoke", "--keep-checkpoints", "-1"], "keep_checkpoints"),
])
def test_cli_bad_input_one_line_error(args, msg, tmp_path):
    """`python -m meta_train` (run in this process): exit status 2, one stderr line naming the problem."""
    proc = run_cli("meta_train", *args, "--output", tmp_path / "o", cwd=ROOT)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and msg in err[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "o").exists()


def test_divergence_penalty_is_an_evosax_fitness_shaping_function():
    import jax.numpy as jnp
    from evosax.core.fitness_shaping import centered_rank_fitness_shaping_fn

    from meta_train.estimators.common import divergence_penalty_shaping

    fitness = jnp.array([1.5, jnp.nan, jnp.inf, 250.0, -jnp.inf], jnp.float32)
    shaped = divergence_penalty_shaping(100.0)(None, fitness, None, None)
    np.testing.assert_array_equal(shaped, np.array([1.5, 100, 100, 100, 100], np.float32))
    ranked = divergence_penalty_shaping(100.0, centered_rank_fitness_shaping_fn)(None, fitness[:2], None, None)
    np.testing.assert_array_equal(ranked, [-0.5, 0.5])  # composes with another shaping function


@pytest.mark.slow
def test_outer_step_is_a_function_of_its_inputs():
    """The same (state, iteration) gives the same new state and log row; the input state is not changed."""
    from meta_train.es import ProgramCache
    from meta_train.outer import make_estimator, outer_step
    from meta_train.train import initial_meta_params

    cfg = apply_overrides(SMOKE, ["inner.thinning=2", "inner.num_steps=10", "tasks.mlp_hidden=8",
                                  "tasks.channels=", "tasks.datasets=synthetic_images", "tasks.max_train=200"])
    phi0 = initial_meta_params(cfg)
    estimator = make_estimator(cfg, phi0)
    cache = ProgramCache()
    state = estimator.init(jax.random.PRNGKey(cfg.seed), cache)
    before = flat(state)
    a, b = (outer_step(estimator, state, 3, cache) for _ in range(2))
    np.testing.assert_array_equal(flat(a.es_state), flat(b.es_state))
    np.testing.assert_array_equal(flat(state), before)
    timing = ("seconds", "inner_seconds")
    assert {k: v for k, v in a.row.items() if k not in timing} == {k: v for k, v in b.row.items() if k not in timing}
    assert a.row["iteration"] == 3 and a.spec.name == a.row["task"] and len(a.row["fitness"]) == cfg.es.population


def test_run_directory_is_locked_while_in_use(tmp_path):
    from meta_train.run_dir import RunDir

    first = RunDir(tmp_path / "run", writer=True).open(SMOKE, resume=False, overwrite=False)
    try:
        with pytest.raises(RunDirError, match="in use by another"):
            RunDir(tmp_path / "run", writer=True).open(SMOKE, resume=True, overwrite=False)
    finally:
        first.close()
    RunDir(tmp_path / "run", writer=True).open(SMOKE, resume=True, overwrite=False).close()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".l2e-output", "config.json"]  # marker, no lock


def test_override_parsing_lives_in_cli():
    import cli
    import meta_train.config
    from base import io

    assert meta_train.config.apply_overrides is cli.apply_overrides and meta_train.config.ConfigError is io.ConfigError
    cfg = cli.apply_overrides(SMOKE, ["sigma=0.5", "execution=vmap"], prefix="es.")
    assert (cfg.es.sigma, cfg.es.execution) == (0.5, "vmap")
    assert cli.apply_overrides(SMOKE, ["tasks.data_dir=none"]).tasks.data_dir is None
    with pytest.raises(ConfigError, match="is a group"):
        cli.apply_overrides(SMOKE, ["es=1"])
    with pytest.raises(ConfigError, match="key=value"):
        cli.apply_overrides(SMOKE, ["es.sigma"])
    assert io.dataclass_from_dict(type(SMOKE), json.loads(json.dumps(SMOKE.to_dict()))) == SMOKE


# ----------------------------------------------------------------------------- sampler kinds and objectives

KINETIC = apply_overrides(SMOKE, ["sampler_kind=kinetic", "num_outer=2", "objective.burn_in=20",
                                  "objective.log_temperature=true", "kinetic.learning_rate=0.3"])


def test_kinetic_preset_and_config_options():
    cfg = PRESETS["kinetic"]
    assert cfg.sampler_kind == "kinetic" and cfg.sampler_config is cfg.kinetic
    assert cfg.objective.kind == "bma" and cfg.objective.log_temperature
    s = cfg.schedule  # 10 samples spread over the window after burn-in
    assert s.sample_steps[-1] == cfg.inner.num_steps and s.sample_steps[0] > cfg.objective.burn_in
    assert s.thinning == (cfg.inner.num_steps - cfg.objective.burn_in) // cfg.inner.num_samples
    assert PRESETS["paper-form"].schedule is PRESETS["paper-form"].inner  # burn_in 0: the schedule as given
    assert PRESETS["paper-form"].sampler_config is PRESETS["paper-form"].sampler
    mass = PRESETS["default"]  # Mass-L2E: M and C_i freeze at the first update of the sampling window
    assert mass.sampler_kind == "mass" and mass.sampler_config.freeze_step == mass.objective.burn_in
    assert from_dict(cfg.to_dict()) == cfg
    for bad, msg in (("sampler_kind=bogus", "sampler_kind"), ("objective.kind=kl", "objective.kind"),
                     ("objective.burn_in=295", "burn_in"), ("kinetic.mu_scale=0", "mu_scale")):
        with pytest.raises(ConfigError, match=msg):
            apply_overrides(cfg, [bad])


def test_kinetic_initial_meta_params_are_sghmc():
    from meta_train.train import initial_meta_params

    phi0 = initial_meta_params(KINETIC)
    last = sorted(phi0, key=lambda k: int(k.split("_")[-1]))[-1]
    assert np.all(flat(phi0[last]) == 0) and np.any(flat(phi0) != 0)
    rnd = initial_meta_params(dataclasses.replace(KINETIC, meta_init="random"))
    assert np.any(flat(rnd[last]) != 0)


@pytest.mark.slow
def test_kinetic_meta_training_logs_temperature_and_checkpoints_its_kind(tmp_path):
    summary = meta_train(KINETIC, tmp_path / "kin", progress=False)
    rows = [json.loads(line) for line in (tmp_path / "kin" / "log.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(np.isfinite(r["meta_loss"]) for r in rows)
    assert all(len(r["t_kin"]) == KINETIC.es.population and all(0 < t < 100 for t in r["t_kin"]) for r in rows)
    params, config, meta = l2e.load_meta_params(tmp_path / "kin")
    assert meta["sampler_kind"] == "kinetic" and config == KINETIC.kinetic
    np.testing.assert_array_equal(flat(params), flat(summary["meta_params"]))
    from tasks import build_task

    task = build_task(KINETIC.tasks.specs()[0])
    sampler = l2e.load_sampler(tmp_path / "kin", posterior=task.posterior)
    state = sampler.init(task.init_params(jax.random.PRNGKey(0)))
    state, info = jax.jit(sampler.step)(jax.random.PRNGKey(2), state,
                                        task.sample_batch(jax.random.PRNGKey(1), task.train_data, 16))
    assert isinstance(state, l2e.kinetic.KineticState) and bool(info.is_finite)


def _fitness(cfg, **kw):
    from meta_train.es import evaluate_population, outer_keys
    from meta_train.train import initial_meta_params

    phi = initial_meta_params(cfg)
    keys = outer_keys(cfg.seed, 0)
    pop = jax.tree.map(lambda x: jnp.stack([x + 0.01, x - 0.01]), phi)
    args = dict(objective=cfg.objective.kind, log_temperature=cfg.objective.log_temperature, execution="sequential")
    return evaluate_population(cfg.tasks.sample(keys.task), pop, keys, cfg.sampler_config, cfg.schedule,
                               cfg.meta_loss_examples, **{**args, **kw})


@pytest.mark.slow
def test_ce_objective_bounds_bma_and_logging_leaves_fitness_unchanged():
    """CE ≥ BMA NLL for the same samples (Jensen; strictly here); T_kin logging changes no fitness bit (l2e and
    kinetic kinds); both executions give the same T_kin to float32 rounding."""
    bma = _fitness(SMOKE)
    ce = _fitness(SMOKE, objective="ce")
    assert np.all(np.asarray(ce.fitness) > np.asarray(bma.fitness)) and bma.t_kin is None
    logged = _fitness(SMOKE, log_temperature=True)
    np.testing.assert_array_equal(np.asarray(logged.fitness), np.asarray(bma.fitness))
    assert logged.t_kin.shape == (2,) and np.all(logged.t_kin > 0)
    kin = _fitness(KINETIC)
    quiet = _fitness(KINETIC, log_temperature=False)
    np.testing.assert_array_equal(np.asarray(kin.fitness), np.asarray(quiet.fitness))
    vm = _fitness(KINETIC, execution="vmap")
    np.testing.assert_allclose(vm.t_kin, kin.t_kin, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(vm.fitness), np.asarray(kin.fitness), rtol=1e-4)
