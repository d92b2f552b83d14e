"""python -m meta_train.policy_backprop: Policy-L2E's meta-gradient by truncated backprop — the outer estimator beside
`meta_train.policy_train`'s antithetic ES, on the same tasks, budgets and meta-loss (meta_train.policy_task).

The chains run their burn-in forward (no gradient), then the meta-loss is differentiated through the sampling
window alone: φ's constants at the freeze (its last adaptation point: M⁻¹'s correction, κ and δ) → the window's
SGHMC updates → the draws' BMA predictive and T_kin → the meta-loss. The truncation drops φ's earlier adaptation
points (their effect on where the window starts): the estimate is biased towards the freeze's constants and, at
the rule's start φ₀ (zero output layers), non-zero only in the output layers. The differentiable meta-loss is the
classification one (class probabilities; a regression task's TV integrates each point's mixture on a grid, not
written in JAX here): regression tasks are refused. A run whose meta-loss or gradient is not finite (a divergent
chain) is left out and counted.

`--output DIR` meta-trains by it: Adam (clipped, the ES's learning rate and clip) on the mean truncated gradient
over `tasks_per_generation` drawn tasks × `runs` chain keys per generation, from φ₀, resumable (config.json,
log.jsonl, state.npz, phi.npz, meta_loss.png as `meta_train.policy_train`'s, whose meta-loss curve — the mean φ on
every configured task with fixed keys — it shares). `--set heads=window` trains the window head alone: the mass
head's gradient is zeroed, so it keeps φ₀'s zero output layer (the rule's mass) exactly.

`--gradient-variance R` measures, at φ₀, the relative variance E‖ĝ − ḡ‖² / ‖ḡ‖² of R independent estimates ĝ (each
the mean over `tasks_per_generation` drawn tasks × `runs` independent chain keys, the same task draws as the ES
measurement), their mean cosine to ḡ, the same for ES on the same tasks, both restricted to the output layers too,
and the seconds per estimate.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import flatten_util  # noqa: F401  (jax.flatten_util)

from l2e import policy as P
from l2e.types import PyTree

__all__ = ["OBJECTIVES", "gradient_variance", "imq_ksd", "train", "window_program"]


def _step(kernel, batches, batch_size: int, data):
    """One update t of the chains as l2e.chains.make_chunk runs it (fold_in(key, t) split into minibatch and noise
    keys): the same chain as the sampler's."""
    def step(phi, key, state, t):
        k_batch, k_noise = jax.random.split(jax.random.fold_in(key, t))
        return kernel(k_noise, state, batches(k_batch, data, batch_size), phi)

    return step


KSD_STATES = 10
"""States per chain the "ksd" objective reads from the window (evenly spaced, the last at the final update): with
K = 10 draws alone a KSD in hundreds of dimensions rewards draws that have collapsed (its diagonal terms)."""
OBJECTIVES = ("fidelity", "ksd")
"""fidelity: the meta-training's meta-loss against the NUTS reference (classification); ksd: log of the kernel Stein
discrepancy (`imq_ksd`) of KSD_STATES states per chain of the window under the full-batch posterior,
reference-free: any task, no reference read."""


def imq_ksd(x: jax.Array, score: jax.Array) -> jax.Array:
    """The V-statistic kernel Stein discrepancy² (1/n²)Σᵢⱼ k_p(xᵢ, xⱼ) of draws x (n, d) with scores ∇log p = `score`
    (n, d), under the IMQ kernel k = (c² + ‖x − y‖²)^(−½) with c² the median of the pairwise ‖x − y‖² (the median
    heuristic, held constant in the gradient): ≥ 0, and → 0 as the draws' law approaches p (Gorham & Mackey, 2017).
    With r = x − y, q = c² + ‖r‖², β = −½: k_p = k·sₓᵀs_y + 2βq^(β−1)(s_y − sₓ)ᵀr − 2βd·q^(β−1) −
    4β(β−1)q^(β−2)‖r‖²."""
    n, d = x.shape
    gram, g = x @ x.T, score @ x.T  # g[i, j] = sᵢᵀxⱼ: every term below is an n × n matrix (no n × n × d tensor)
    sq = jnp.diag(gram)
    r2 = jnp.maximum(sq[:, None] + sq[None, :] - 2 * gram, 0.0)
    c2 = jax.lax.stop_gradient(jnp.maximum(jnp.median(r2[jnp.triu_indices(n, 1)]), 1e-12))
    beta, qq = -0.5, c2 + r2
    ss = score @ score.T
    own = jnp.diag(g)
    cross = g.T - own[None, :] - own[:, None] + g  # (s_j − s_i)ᵀ(x_i − x_j)
    kp = (qq**beta * ss + 2 * beta * qq ** (beta - 1) * cross - 2 * beta * d * qq ** (beta - 1)
          - 4 * beta * (beta - 1) * qq ** (beta - 2) * r2)
    return jnp.mean(kp)


def _ksd_term(task, thin: int):
    """states (leaves (T, M, ...): the window's positions) -> log KSD² of every `thin`-th state of every chain."""
    def ksd(states):
        picked = jax.tree.map(lambda v: v[thin - 1::thin].reshape((-1,) + v.shape[2:]), states)
        flat = jax.vmap(lambda p: jax.flatten_util.ravel_pytree(p)[0])(picked)
        unflat = jax.flatten_util.ravel_pytree(jax.tree.map(lambda v: v[0, 0], states))[1]
        grad_u = jax.vmap(lambda f: jax.flatten_util.ravel_pytree(
            task.posterior.potential_grad(unflat(f), task.train_data)[1])[0])(flat)
        return jnp.log(imq_ksd(flat, -grad_u))

    return ksd


def _fidelity_term(pt, dispersion_weight: float):
    """positions (the draws, one per chain) -> the meta-loss's fidelity and dispersion terms (policy_task's)."""
    q = jnp.asarray(np.exp(pt.ref).mean(0), jnp.float32)  # the reference's BMA predictive (rows, C)
    lo, hi = pt.band

    def fidelity(positions):
        probs = jnp.exp(pt.task.predict(positions, pt.x))  # (K, rows, C)
        tv = jnp.mean(0.5 * jnp.sum(jnp.abs(probs.mean(0) - q), axis=-1))
        ratio = jnp.mean(jnp.var(probs, axis=0, ddof=1)) / pt.ref_var
        disp = jax.nn.relu(jnp.log(lo / ratio)) + jax.nn.relu(jnp.log(ratio / hi))
        return jnp.log(tv / pt.floor) + dispersion_weight * disp

    return fidelity


def window_program(pt, config: P.PolicyConfig, gradients: int, draws: int, chains: int, batch_size: int,
                   dispersion_weight: float = 1.0, temperature_weight: float = 1.0, objective: str = "fidelity"):
    """run(phi, key) -> (meta-loss, ∂meta-loss/∂φ through the sampling window) on task `pt`
    (meta_train.policy_task.PolicyTask; "fidelity": a classification task) at budget `gradients`, K = `draws` = M =
    `chains` (one draw per chain, at the last update, as the meta-training's split_budget gives); the same keys as
    `population_program`'s. objective: OBJECTIVES ("ksd": log KSD² of the window's states, plus the same T_kin
    penalty)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if objective == "fidelity" and pt.task.likelihood.has_class_probs is False:
        raise ValueError(f"{pt.name}: truncated backprop's meta-loss is the classification one (module docstring)")
    steps, per_chain, _, freeze = P.split_budget(config, gradients, draws, chains)
    if per_chain != 1:
        raise ValueError("truncated backprop reads one draw per chain (draws == chains)")
    config = dataclasses.replace(config, freeze_step=freeze, noise_halves=batch_size % 2 == 0)
    task = pt.task
    step = _step(P.build_kernel(task.posterior, config), P.per_chain_batches(task.sample_batch, chains), batch_size,
                 task.train_data)
    temperature = config.temperature

    @jax.jit
    def burn(phi, key):
        k_init, k_chain = jax.random.split(key)
        state = P.init(jax.vmap(task.init_params)(jax.random.split(k_init, chains)))
        state, _ = jax.lax.scan(lambda s, t: step(phi, k_chain, s, t), state, jnp.arange(freeze))
        return state

    fit = (_ksd_term(task, max(1, (steps - freeze) // KSD_STATES)) if objective == "ksd"
           else _fidelity_term(pt, dispersion_weight))

    def update(phi, key):
        def body(s, t):
            s, info = step(phi, key, s, t)
            return s, (info, s.position if objective == "ksd" else None)

        return body

    def window_loss(phi, state, key):
        k_chain = jax.random.split(key)[1]
        state, (info, states) = jax.lax.scan(update(phi, k_chain), state, jnp.arange(freeze, steps))
        w = info.sampling.astype(jnp.float32)
        t_kin = jnp.sum(info.t_kin * w) / jnp.maximum(jnp.sum(w), 1.0)
        heat = jax.nn.relu(jnp.abs(t_kin - temperature) / temperature - 0.1)
        return fit(states if objective == "ksd" else state.position) + temperature_weight * heat

    grad = jax.jit(jax.value_and_grad(window_loss))

    def run(phi, key):
        loss, g = grad(phi, burn(phi, key), key)
        return float(loss), g

    run.burn, run.window = burn, grad  # burn(φ, key) -> the state at the freeze; window(φ, state, key) -> (loss, ∂φ)
    return run


def _output_mask(phi0) -> np.ndarray:
    """1 on the output layers' coordinates of the flattened φ (each network's last Dense_k), 0 elsewhere."""
    def mark(path, leaf):
        net, layer = (getattr(k, "key", str(k)) for k in path[:2])
        last = max(phi0[net], key=lambda n: int(n.rsplit("_", 1)[1]))
        return np.full(np.shape(leaf), 1.0 if layer == last else 0.0)

    return np.asarray(jax.flatten_util.ravel_pytree(jax.tree_util.tree_map_with_path(mark, phi0))[0])


def _spread(g: np.ndarray, mask: np.ndarray | None = None) -> dict:
    """Relative variance E‖ĝ − ḡ‖²/‖ḡ‖² and mean cosine(ĝ_r, ḡ) of the rows of g (on the masked coordinates)."""
    g = g if mask is None else g[:, mask > 0]
    mean = g.mean(0)
    rel = float(np.mean(np.sum((g - mean) ** 2, axis=1)) / np.sum(mean**2))
    cos = float(np.mean(g @ mean / (np.linalg.norm(g, axis=1) * np.linalg.norm(mean) + 1e-30)))
    return {"relative_variance": rel, "mean_cosine": cos}


def gradient_variance(config, repeats: int, runs: int, objective: str = "fidelity") -> dict:
    """At φ₀ (module docstring): truncated backprop's relative variance on config's tasks (classification for
    "fidelity"), R = `repeats` estimates, every coordinate and the output layers alone, and, for "fidelity", ES's on
    the same tasks and task draws; seconds per estimate (backprop's after its first estimate; both include compiling
    a task's programs on first use)."""
    from meta_train.policy_train import Programs, _generation_tasks, gradient_variance as es_gradient_variance

    phi0 = P.init_meta_params(jax.random.PRNGKey(config.seed), config.hidden)
    evals = Programs(config)  # the tasks, loaded once for both estimators
    programs = {(t, b): window_program(pt, config.sampler(), b, config.draws, config.chains, config.batch_size,
                                       config.dispersion_weight, config.temperature_weight, objective)
                for t, pt in evals.tasks.items() for b in config.budgets}
    grads, seconds, dropped = [], [], 0
    for r in range(repeats):
        t0 = time.perf_counter()
        names = _generation_tasks(config, 1_000_000 + r)
        grad, _, lost = _mean_gradient(programs, names, config.budgets, runs, phi0,
                                       jax.random.fold_in(jax.random.PRNGKey(config.seed + 2), r))
        dropped += lost
        if grad is not None:
            grads.append(np.asarray(jax.flatten_util.ravel_pytree(grad)[0], np.float64))
        seconds.append(time.perf_counter() - t0)
    g, mask = np.stack(grads), _output_mask(phi0)
    res = {"repeats": repeats, "runs_per_task": runs, "objective": objective, "tasks": list(config.tasks),
           "tasks_per_generation": config.tasks_per_generation, "budgets": list(config.budgets),
           "base_step": config.base_step, "dropped_runs": dropped,
           "backprop": {**_spread(g), "output_layers": _spread(g, mask),
                        "seconds_per_estimate": float(np.mean(seconds[1:] if repeats > 1 else seconds))}}
    if objective != "fidelity":
        return res
    t0 = time.perf_counter()
    es = es_gradient_variance(config, repeats, raw=True, programs=evals)["estimates"]
    return {**res, "es": {**_spread(es), "output_layers": _spread(es, mask),
                          "seconds_per_estimate": (time.perf_counter() - t0) / repeats,
                          "population": config.population, "sigma": config.sigma},
            "cosine_between_means": float(np.dot(g.mean(0), es.mean(0)) / (
                np.linalg.norm(g.mean(0)) * np.linalg.norm(es.mean(0)) + 1e-30))}


def _mean_gradient(programs: dict, names, budgets, runs: int, phi, key) -> tuple[PyTree | None, float, int]:
    """(mean ∂meta-loss/∂φ over names × budgets × runs chain keys (None if no run was finite), their mean meta-loss,
    the runs left out as not finite)."""
    parts, losses, dropped = [], [], 0
    for i, name in enumerate(names):
        for b in budgets:
            for j in range(runs):
                loss, g = programs[name, b](phi, jax.random.fold_in(key, i * 1000 + j))
                if np.isfinite(loss) and all(bool(jnp.all(jnp.isfinite(v))) for v in jax.tree.leaves(g)):
                    parts.append(g)
                    losses.append(loss)
                else:
                    dropped += 1
    if not parts:
        return None, float("nan"), dropped
    return jax.tree.map(lambda *v: jnp.mean(jnp.stack(v), 0), *parts), float(np.mean(losses)), dropped


def train(config, output, runs: int = 4, progress=print, objective: str = "fidelity") -> dict:
    """Run (or resume) truncated-backprop meta-training in directory `output` (module docstring); returns the last
    log row. A directory holding another configuration (or not this kind of run) is refused (ValueError)."""
    from meta_train.policy_train import (Programs, _generation_tasks, _load_state, _save_state, append_row, eval_row,
                                         open_run)

    conf = {"kind": "policy_backprop", "runs": runs, **dataclasses.asdict(config),
            **({} if objective == "fidelity" else {"objective": objective})}
    out, done, start = open_run(output, conf, "backprop")
    phi = P.init_meta_params(jax.random.PRNGKey(config.seed), config.hidden)
    opt = optax.chain(optax.clip_by_global_norm(config.clip_norm), optax.adam(config.learning_rate))
    state = (phi, opt.init(phi))
    if start:
        state = _load_state(out / "state.npz", state)
    evals = Programs(config)
    programs = {(t, b): window_program(pt, config.sampler(), b, config.draws, config.chains, config.batch_size,
                                       config.dispersion_weight, config.temperature_weight, objective)
                for t, pt in evals.tasks.items() for b in config.budgets}
    row = {}
    for g in range(start, config.generations + 1):
        t0, (phi, opt_state) = time.perf_counter(), state
        row = eval_row(out, config, done, g, evals, phi, "policy_backprop", progress, t0) or row
        if g == config.generations:
            break
        names = _generation_tasks(config, g)
        grad, loss, dropped = _mean_gradient(programs, names, config.budgets, runs, phi,
                                             jax.random.fold_in(jax.random.PRNGKey(config.seed + 3), g))
        if grad is not None:
            grad = {h: g if h in config.heads else jax.tree.map(jnp.zeros_like, g) for h, g in grad.items()}
            updates, opt_state = opt.update(grad, opt_state, phi)
            state = (optax.apply_updates(phi, updates), opt_state)
        _save_state(out / "state.npz", state)
        P.save_meta_params(out / "phi.npz", state[0])
        row = {"kind": "train", "generation": g, "tasks": names, "fitness_mean": loss, "dropped": dropped,
               "seconds": time.perf_counter() - t0}
        append_row(out, row)
        progress(f"policy_backprop: generation {g} mean meta-loss {loss:.4f} ({row['seconds']:.1f} s)")
    return row


def main(argv=None) -> int:
    from meta_train.policy_train import config_from_overrides

    p = argparse.ArgumentParser(prog="python -m meta_train.policy_backprop", description=__doc__.splitlines()[0])
    p.add_argument("--reference", default="results/references", help="the zoo's reference directory")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help="a PolicyTrainConfig field (tuples comma-separated), e.g. tasks=digits/mlp-16,wine/mlp-16")
    p.add_argument("--output", default=None, help="run directory (resumed when it holds this configuration)")
    p.add_argument("--generations", type=int, default=None, help="default: PolicyTrainConfig's")
    p.add_argument("--gradient-variance", type=int, default=0, metavar="R",
                   help="measure both estimators' relative variance over R estimates at φ₀ instead of training")
    p.add_argument("--runs", type=int, default=4, help="chain keys per task in one backprop estimate (default 4)")
    p.add_argument("--objective", choices=OBJECTIVES, default="fidelity",
                   help="fidelity (the reference meta-loss, classification) or ksd (reference-free)")
    p.add_argument("--json", default=None, help="also write the result here")
    args = p.parse_args(argv)
    try:
        if args.runs < 1 or (args.output is None) == (args.gradient_variance == 0):
            raise ValueError("give either --output DIR (train) or --gradient-variance R, and --runs >= 1")
        config = config_from_overrides(args.reference, args.generations, args.overrides)
        if args.output is not None:
            train(config, args.output, args.runs, objective=args.objective)
            return 0
        if args.gradient_variance < 2:
            raise ValueError("--gradient-variance needs R >= 2")
        res = gradient_variance(config, args.gradient_variance, args.runs, args.objective)
        text = json.dumps(res, indent=1)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
        print(text)
    except (ValueError, OSError) as e:
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
