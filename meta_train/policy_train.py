"""python -m meta_train.policy_train: meta-train Policy-L2E's adaptation policy (l2e.policy) on the zoo's
meta-training half only (tasks.zoo.train_names), by antithetic ES (evosax Open_ES, σ constant, clipped Adam) with
common random numbers: every member of a generation runs the same inits and minibatches on the same tasks.

A generation draws `tasks_per_generation` of the configured tasks; each member's fitness is its meta-loss
(meta_train.policy_task) averaged over those tasks and the budgets. Every `eval_every` generations the mean φ is
scored on every configured task and budget with fixed keys: the meta-loss curve (log.jsonl, "eval" rows). The run
directory holds config.json, log.jsonl, state.npz (the ES state after the last finished generation: a rerun with
the same configuration resumes there; `generations` may grow), meta_loss.png (`plot_log`, redrawn at every
"eval" row) and phi.npz (the mean φ; `python -m evaluate ... --set
settings.policy.meta_params=DIR/phi.npz`). `--gradient-variance R` instead measures, at φ₀, the relative variance
E‖ĝ − ḡ‖² / ‖ḡ‖² of R independent generation-sized ES estimates ĝ (and their mean cosine to ḡ).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import flatten_util  # noqa: F401  (jax.flatten_util)

from l2e import policy as P

__all__ = ["DEFAULT_TASKS", "HEADS", "PolicyTrainConfig", "config_from_overrides", "gradient_variance", "train"]

DEFAULT_TASKS = ("digits/mlp-16", "wine/mlp-16", "breast_cancer/mlp-16", "digits/mlp-linear", "digits/mlp-64-p0.05",
                 "iris/mlp-8-tanh", "breast_cancer/mlp-8-tanh", "breast_cancer/mlp-16x16-tanh-p0.05",
                 "synthetic_tabular/mlp-8-tanh", "synthetic_tabular/mlp-linear", "synthetic_images/mlp-linear",
                 "synthetic_images/mlp-16-tanh", "wine/mlp-linear-p1", "uci:energy[mile-s1]/mlp-linear",
                 "uci:power-plant[mile-s1]/mlp-linear", "uci:concrete[mile-s1]/mlp-linear-p0.1",
                 "uci:airfoil[mile-s1]/mlp-linear", "uci:wine-quality-red[mile-s1]/mlp-linear-homo",
                 "uci:kin8nm[mile-s1]/mlp-linear")
"""The shipped preset's tasks: the converged classification MLPs and linear models and the converged regression
tasks of the meta-training half (its CNNs cost too much for the 60-minute CPU budget)."""


HEADS = ("mass", "window")
"""φ's two heads (l2e.policy): the per-coordinate mass correction and the window's step and damping factors."""


@dataclasses.dataclass(frozen=True)
class PolicyTrainConfig:
    """reference: the zoo's reference directory; tasks: meta-training tasks (each in tasks.zoo.train_names());
    budgets: G per run; chains M; draws K; batch_size B; population, sigma, learning_rate, clip_norm: the ES;
    generations; tasks_per_generation; eval_every; hidden: the policy networks' widths; base_step: η₀ of phase 0's
    travel; base_kappa: κ₀ of the rule the policy corrects; curvature: where the stability cap is measured
    (l2e.policy.PolicyConfig's); max_step_gain: the bound on φ's step factor (PolicyConfig's); task_shaping:
    "standardise" (each task's losses standardised over the population before the ES averages them: regression's
    meta-loss runs on a larger scale than classification's) or "none";
    dispersion_weight, temperature_weight: the meta-loss's; seed; heads: the heads of φ that learn (HEADS; a head
    left out keeps its zero output layer, the rule's value there; a subset is trained by meta_train.policy_backprop
    only)."""

    reference: str = "results/references"
    tasks: tuple[str, ...] = DEFAULT_TASKS
    budgets: tuple[int, ...] = (2000,)
    chains: int = 10
    draws: int = 10
    batch_size: int = 64
    population: int = 16
    sigma: float = 0.1
    learning_rate: float = 0.03
    clip_norm: float = 1.0
    generations: int = 150
    tasks_per_generation: int = 4
    eval_every: int = 10
    hidden: tuple[int, ...] = (16,)
    base_step: float = P.PolicyConfig.base_step
    base_kappa: float = 0.15
    curvature: str = "warm"
    max_step_gain: float = P.PolicyConfig.max_step_gain
    task_shaping: str = "standardise"
    dispersion_weight: float = 1.0
    temperature_weight: float = 1.0
    seed: int = 0
    heads: tuple[str, ...] = HEADS

    def __post_init__(self):
        from tasks.zoo import train_names

        for name in ("tasks", "budgets", "hidden", "heads"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        outside = [t for t in self.tasks if t not in set(train_names())]
        if outside:
            raise ValueError(f"tasks outside the zoo's meta-training half: {', '.join(outside)}")
        if not self.tasks or not self.budgets or self.population < 2 or self.population % 2:
            raise ValueError("need tasks, budgets and an even population >= 2")
        if not 0 < self.tasks_per_generation <= len(self.tasks):
            raise ValueError(f"tasks_per_generation must be in [1, {len(self.tasks)}]")
        if self.task_shaping not in ("standardise", "none"):
            raise ValueError(f"task_shaping must be standardise or none, got {self.task_shaping!r}")
        if not self.heads or len(set(self.heads)) != len(self.heads) or not set(self.heads) <= set(HEADS):
            raise ValueError(f"heads must be a non-empty subset of {', '.join(HEADS)}, got {', '.join(self.heads)}")
        self.sampler()  # the sampler's own checks (e.g. curvature)

    def sampler(self) -> P.PolicyConfig:
        return P.PolicyConfig(base_step=self.base_step, base_kappa=self.base_kappa, curvature=self.curvature,
                              max_step_gain=self.max_step_gain)


class Programs:
    """The loaded tasks and their compiled population programs, one per (task, budget), built on first use."""

    def __init__(self, config: PolicyTrainConfig):
        from meta_train.policy_task import load_policy_task

        self.config = config
        self.tasks = {t: load_policy_task(t, config.reference, config.draws, config.seed) for t in config.tasks}
        self.programs: dict = {}

    def losses(self, name: str, budget: int, phis, key) -> tuple[np.ndarray, dict]:
        from meta_train.policy_task import population_losses, population_program

        c = self.config
        if (name, budget) not in self.programs:
            self.programs[name, budget] = population_program(self.tasks[name], c.sampler(), budget, c.draws,
                                                             c.chains, c.batch_size)
        probs, t_kin = self.programs[name, budget](phis, key)
        return population_losses(self.tasks[name], probs, t_kin, c.dispersion_weight, c.temperature_weight)

    def fitness(self, names, phis, key) -> tuple[np.ndarray, np.ndarray, dict]:
        """(mean meta-loss per member over `names` × budgets, the ES's fitness, per-task medians) with the same key
        for every member (common random numbers). The ES's fitness is that mean, or (config.task_shaping
        "standardise") the mean of each task's losses standardised over the population, so that every task weighs
        the same whatever its loss's scale."""
        rows, shaped, stats = [], [], {}
        for i, name in enumerate(names):
            for budget in self.config.budgets:
                loss, s = self.losses(name, budget, phis, jax.random.fold_in(key, i))
                rows.append(loss)
                shaped.append((loss - np.mean(loss)) / (np.std(loss) + 1e-8))
                stats[f"{name}@{budget}"] = {k: float(np.median(v)) for k, v in s.items()}
        raw = np.mean(rows, axis=0)
        return raw, (np.mean(shaped, axis=0) if self.config.task_shaping == "standardise" else raw), stats


def _strategy(config: PolicyTrainConfig, phi0):
    from evosax.algorithms import Open_ES
    from evosax.core.fitness_shaping import identity_fitness_shaping_fn

    return Open_ES(population_size=config.population, solution=phi0, use_antithetic_sampling=True,
                   optimizer=optax.chain(optax.clip_by_global_norm(config.clip_norm), optax.adam(config.learning_rate)),
                   std_schedule=optax.constant_schedule(config.sigma), fitness_shaping_fn=identity_fitness_shaping_fn)


def _generation_tasks(config: PolicyTrainConfig, g: int) -> list[str]:
    rng = np.random.default_rng([config.seed, g])
    return [config.tasks[i] for i in sorted(rng.choice(len(config.tasks), config.tasks_per_generation, replace=False))]


def _save_state(path: Path, state) -> None:
    leaves = {f"leaf_{i:04d}": np.asarray(v) for i, v in enumerate(jax.tree.leaves(state))}
    tmp = path.with_suffix(".tmp.npz")
    with open(tmp, "wb") as f:
        np.savez(f, **leaves)
    tmp.replace(path)


def _load_state(path: Path, template):
    leaves, treedef = jax.tree.flatten(template)
    with np.load(path, allow_pickle=False) as z:
        got = [z[f"leaf_{i:04d}"] for i in range(len(leaves))]
    if any(np.shape(a) != np.shape(b) for a, b in zip(got, leaves)):
        raise ValueError(f"{path}: not a state of this configuration")
    return jax.tree.unflatten(treedef, [jnp.asarray(a, dtype=jnp.asarray(b).dtype) for a, b in zip(got, leaves)])


def _mean_phi(strategy, state):
    return strategy.get_mean(state)


def _evaluate(programs: Programs, phi, seed: int) -> dict:
    """The mean φ's meta-loss on every configured task and budget, fixed keys (the meta-loss curve)."""
    phis = jax.tree.map(lambda v: jnp.asarray(v)[None], phi)
    loss, _, stats = programs.fitness(programs.config.tasks, phis, jax.random.PRNGKey(10_000 + seed))
    return {"loss": float(loss[0]), "tasks": stats}


def plot_log(rows: list[dict], path: Path) -> None:
    """meta_loss.png: each generation's mean fitness (its tasks vary) and the meta-loss curve (the "eval" rows)."""
    from meta_train.run_dir import write_plot

    def draw(ax):
        train_rows = [r for r in rows if r["kind"] == "train"]
        evals = [r for r in rows if r["kind"] == "eval"]
        ax.plot([r["generation"] for r in train_rows], [r["fitness_mean"] for r in train_rows], ".", alpha=0.4,
                label="generation's mean meta-loss (its tasks)")
        ax.plot([r["generation"] for r in evals], [r["loss"] for r in evals], "o-",
                label="mean φ, every task (fixed keys)")

    write_plot(draw, path, "generation")


ADDED_FIELDS = {"max_step_gain": P.PolicyConfig.max_step_gain, "heads": list(HEADS)}
"""Configuration fields added after runs were made, with the value those runs had (open_run)."""


def open_run(output, conf: dict, what: str) -> tuple[Path, list[dict], int]:
    """Open (or create) a policy run directory for configuration `conf` (its "kind" included): (the directory, the
    rows of its log.jsonl, the first generation still to run). A directory holding another configuration (only
    `generations` may differ: a run may be extended) or no configuration of ours is refused (ValueError naming
    `what`); config.json is then (re)written. A field added since a run began (ADDED_FIELDS) reads as its default
    there, so such a run still resumes."""
    out = Path(output)
    conf = json.loads(json.dumps(conf))
    same = {k: v for k, v in conf.items() if k != "generations"}
    if out.exists():
        stored = json.loads((out / "config.json").read_text()) if (out / "config.json").is_file() else None
        stored = {**ADDED_FIELDS, **stored} if isinstance(stored, dict) else stored
        if not isinstance(stored, dict) or {k: v for k, v in stored.items() if k != "generations"} != same:
            raise ValueError(f"--output {out} holds something else (another configuration or not a {what} run)")
    else:
        out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(conf, indent=1) + "\n")
    log = out / "log.jsonl"
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    return out, done, max([r["generation"] + 1 for r in done if r["kind"] == "train"], default=0)


def append_row(out: Path, row: dict) -> None:
    """One row appended to the run's log.jsonl."""
    with open(out / "log.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def eval_row(out: Path, config: PolicyTrainConfig, done: list[dict], g: int, programs: "Programs", phi,
             prefix: str, progress, t0: float) -> dict | None:
    """Generation g's "eval" row (the mean φ on every task, `_evaluate`) when one is due (every eval_every and at
    the last) and not logged yet: appended, reported and plotted (meta_loss.png); else None."""
    if not (g % config.eval_every == 0 or g == config.generations) or any(
            r["kind"] == "eval" and r["generation"] == g for r in done):
        return None
    row = {"kind": "eval", "generation": g, **_evaluate(programs, phi, config.seed),
           "seconds": time.perf_counter() - t0}
    append_row(out, row)
    progress(f"{prefix}: generation {g} eval meta-loss {row['loss']:.4f}")
    plot_log([json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()], out / "meta_loss.png")
    return row


def train(config: PolicyTrainConfig, output, progress=print) -> dict:
    """Run (or resume) the meta-training in directory `output` (module docstring); returns the last log row. A
    subset of heads is refused (ValueError): the ES perturbs every head."""
    if set(config.heads) != set(HEADS):
        raise ValueError(f"heads={','.join(config.heads)}: only meta_train.policy_backprop trains a subset of φ's heads")
    out, done, start = open_run(output, {"kind": "policy_train", **dataclasses.asdict(config)}, "policy")
    phi0 = P.init_meta_params(jax.random.PRNGKey(config.seed), config.hidden)
    strategy = _strategy(config, phi0)
    params = strategy.default_params
    state = strategy.init(jax.random.PRNGKey(config.seed), phi0, params)
    if start:
        state = _load_state(out / "state.npz", state)
    programs = Programs(config)
    row = {}
    for g in range(start, config.generations + 1):
        t0 = time.perf_counter()
        row = eval_row(out, config, done, g, programs, _mean_phi(strategy, state), "policy_train", progress, t0) or row
        if g == config.generations:
            break
        key = jax.random.fold_in(jax.random.PRNGKey(config.seed), g)
        k_ask, k_run = jax.random.split(key)
        population, new = strategy.ask(k_ask, state, params)
        names = _generation_tasks(config, g)
        fitness, shaped, stats = programs.fitness(names, population, k_run)
        state, _ = strategy.tell(k_ask, population, jnp.asarray(shaped, jnp.float32), new, params)
        _save_state(out / "state.npz", state)
        P.save_meta_params(out / "phi.npz", _mean_phi(strategy, state))
        row = {"kind": "train", "generation": g, "tasks": names, "fitness_mean": float(np.mean(fitness)),
               "fitness_min": float(np.min(fitness)), "seconds": time.perf_counter() - t0}
        append_row(out, row)
        progress(f"policy_train: generation {g} mean fitness {row['fitness_mean']:.4f} ({row['seconds']:.1f} s)")
    return row


def gradient_variance(config: PolicyTrainConfig, repeats: int, raw: bool = False, programs=None) -> dict:
    """At φ₀: `repeats` independent generation-sized antithetic ES estimates ĝ_r = mean_i z_i·f_i/σ (own
    perturbations, tasks and minibatch keys each); relative variance E‖ĝ − ḡ‖²/‖ḡ‖² and mean cosine(ĝ_r, ḡ);
    with `raw`, also the estimates themselves ("estimates", (repeats, |φ|)); `programs`: config's loaded Programs
    (default: loaded here)."""
    phi0 = P.init_meta_params(jax.random.PRNGKey(config.seed), config.hidden)
    flat0, unravel = jax.flatten_util.ravel_pytree(phi0)
    programs = programs or Programs(config)
    grads = []
    for r in range(repeats):
        key = jax.random.fold_in(jax.random.PRNGKey(config.seed + 1), r)
        z = jax.random.normal(key, (config.population // 2, flat0.size))
        z = jnp.concatenate([z, -z])
        phis = jax.vmap(unravel)(flat0 + config.sigma * z)
        _, fitness, _ = programs.fitness(_generation_tasks(config, 1_000_000 + r), phis, jax.random.fold_in(key, 1))
        grads.append(np.asarray(z).T @ (fitness - fitness.mean()) / (len(fitness) * config.sigma))
    g = np.stack(grads)
    mean = g.mean(0)
    rel = float(np.mean(np.sum((g - mean) ** 2, axis=1)) / np.sum(mean**2))
    cos = float(np.mean(g @ mean / (np.linalg.norm(g, axis=1) * np.linalg.norm(mean) + 1e-30)))
    return {"repeats": repeats, "relative_variance": rel, "mean_cosine": cos, "population": config.population,
            "sigma": config.sigma, "tasks_per_generation": config.tasks_per_generation, "budgets": list(config.budgets),
            **({"estimates": g} if raw else {})}


def config_from_overrides(reference: str, generations: int | None, overrides: list[str]) -> PolicyTrainConfig:
    """PolicyTrainConfig from the command line's --reference, --generations (None: the default) and --set
    FIELD=VALUE items (tuples comma-separated); ValueError (one line) for an unknown field or a bad value."""
    fields = {f.name: f for f in dataclasses.fields(PolicyTrainConfig)}
    kw = {"reference": reference, **({} if generations is None else {"generations": generations})}
    for item in overrides:
        name, _, value = item.partition("=")
        if name not in fields:
            raise ValueError(f"--set {item}: unknown field {name!r}")
        default = fields[name].default
        kw[name] = (tuple(type(default[0])(v) for v in value.split(",")) if isinstance(default, tuple)
                    else type(default)(value))
    return PolicyTrainConfig(**kw)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m meta_train.policy_train", description=__doc__.splitlines()[0])
    p.add_argument("--output", required=True, help="run directory (resumed when it holds this configuration)")
    p.add_argument("--reference", default="results/references", help="the zoo's reference directory")
    p.add_argument("--generations", type=int, default=PolicyTrainConfig.generations)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help="a PolicyTrainConfig field (tuples comma-separated), e.g. budgets=1000,4000")
    p.add_argument("--gradient-variance", type=int, default=0, metavar="R",
                   help="measure the ES gradient's relative variance over R estimates at φ₀ instead of training")
    args = p.parse_args(argv)
    try:
        config = config_from_overrides(args.reference, args.generations, args.overrides)
        if args.gradient_variance:
            print(json.dumps(gradient_variance(config, args.gradient_variance)))
            return 0
        train(config, args.output)
    except (ValueError, OSError) as e:
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
