"""Why fixed-step SGHMC cannot sit at T = 1 on a task: its gradient-noise heat, predicted and measured, and what a
burn-in step controller does about it (the budget-curve issue's "defaults that do not diverge", power plant).

For SGHMC (l2e.sghmc: r ← r − ε∇Ũ − εCr + N(0, 2CεT), ε = sqrt(lr/N)) the minibatch gradient ∇Ũ = N·mean_B ∇ℓᵢ + ∇prior
adds momentum variance ε²·N²·vᵢ/B per update and coordinate (vᵢ the per-example gradient variance), the thermostat
2CεT; so the kinetic temperature's excess over T is about

    predicted excess = ε·N²·mean_i vᵢ / (2·C·B·T)

(vᵢ measured at the chain's last state on BATCH_VAR examples). Per (lr, C) it runs, from task.init_params(seed):
  fixed       G updates at lr: the window's T_kin (the last WINDOW updates) and the predicted excess;
  controlled  the same with a burn-in controller over the first G − WINDOW updates: every SEGMENT updates, when the
              segment's last half has T_kin > (1 + TOL)·T, lr ← lr·clip((TOL/(T_kin − 1))², 1/100, 1/2) (the excess
              ∝ ε ∝ sqrt(lr)) and the momentum restarts at 0; a non-finite segment is undone and lr divided by 10;
              the window then runs at the last lr.

    python -m bench.sghmc_heat [--task uci:power-plant/mlp-linear] [--seeds 0,1] [--json FILE]
    python -m bench.sghmc_heat --transient 8000 [--task ...] [--seeds 0,1,2]

--transient G: instead, the shipped Transient-L2E for G updates (K = 10 draws G/20 apart, the window from update
G/2): its window's raw T_kin (Info.kinetic) and the splitting-corrected Σ(1 − εγᵢ/2)·rᵢ(M⁻¹r)ᵢ/d at the end of every
chunk (the friction's Euler step holds the momentum at T/(1 − εγᵢ/2) while θ is exact to O(ε²λ),
docs/sampling.md), with ε, γ and how many coordinates sit at the damping cap MAX_DAMPING.

Needs $L2E_DATA_DIR for UCI and MNIST tasks. One line per run: window T_kin, final lr, predicted excess and the
momentum's relaxation time 1/(εC) in updates at the final lr (a chain whose relaxation time is far beyond its
window is not sampling, whatever its T_kin).
"""
from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np

import l2e
from l2e.chains import make_chunk
from l2e.types import tree_size

GRID = ((0.01, 30.0), (0.01, 10.0), (0.1, 30.0))
"""(lr, C): the default preset's SGHMC choices on power plant (lr 0.01, C 30) and two neighbours."""
G, WINDOW, SEGMENT, CHUNK, BATCH, BATCH_VAR, TOL = 1000, 450, 50, 10, 128, 1024, 0.25


def gradient_noise(task, position, key) -> float:
    """mean over coordinates of the per-example gradient variance vᵢ of the likelihood term (BATCH_VAR examples)."""
    batch = task.sample_batch(key, task.train_data, BATCH_VAR)
    n = task.posterior.data_size

    def one(example):
        single = jax.tree.map(lambda x: x[None], example)
        return jnp.concatenate([g.ravel() for g in jax.tree.leaves(
            task.posterior.value_and_potential_grad(position, single)[2])]) / n  # ≈ ∇ℓᵢ + ∇prior / N

    grads = jax.vmap(one)(batch)
    return float(jnp.mean(jnp.var(grads, axis=0)))


def run(task, chunk, lr: float, friction: float, seed: int, controlled: bool) -> dict:
    """One chain (module docstring); its window T_kin, final lr and predicted excess."""
    d = tree_size(task.init_params(jax.random.PRNGKey(0)))
    state = l2e.sghmc.init(task.init_params(jax.random.PRNGKey(seed)))
    key, start, window, cuts = jax.random.PRNGKey(100 + seed), 0, [], 0
    while start < G:
        length = SEGMENT if start < G - WINDOW else WINDOW
        args = {"lr": jnp.float32(lr), "friction": jnp.float32(friction)}
        before, kinetic = state, []
        for t in range(start, start + length, CHUNK):
            state, info = chunk(state, key, jnp.int32(t), task.train_data, args)
            kinetic.append(np.asarray(info.kinetic, np.float64))
        kinetic = np.concatenate(kinetic) / d
        start += length
        if start > G - WINDOW:
            window = kinetic
            continue
        t_seg = float(np.mean(kinetic[len(kinetic) // 2:]))
        if controlled and not np.isfinite(t_seg):
            state, lr, cuts = before, lr / 10.0, cuts + 1
        elif controlled and t_seg > 1.0 + TOL:
            lr *= float(np.clip((TOL / (t_seg - 1.0)) ** 2, 0.01, 0.5))
            state, cuts = state._replace(momentum=jax.tree.map(jnp.zeros_like, state.momentum)), cuts + 1
    eps = np.sqrt(lr / task.posterior.data_size)
    v = gradient_noise(task, state.position, jax.random.PRNGKey(7))
    excess = eps * task.posterior.data_size**2 * v / (2.0 * friction * BATCH)
    return {"seed": seed, "controlled": controlled, "final_lr": lr, "cuts": cuts,
            "t_kin": float(np.mean(window)), "predicted_excess": float(excess), "grad_var": v,
            "relaxation_updates": float(1.0 / (eps * friction))}


def transient_heat(task, steps: int, seed: int) -> dict:
    """The --transient run of one seed (module docstring)."""
    import dataclasses

    from l2e import transient as T

    params, config, _ = l2e.load_meta_params("transient")
    freeze = steps - 10 * (steps // 20)
    kernel = T.build_kernel(task.posterior, dataclasses.replace(config, freeze_step=freeze))
    chunk = jax.jit(make_chunk(lambda k, s, b, a: kernel(k, s, b, params), task.sample_batch, BATCH, CHUNK))
    flat = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])  # noqa: E731
    state, key = T.init(task.init_params(jax.random.PRNGKey(seed))), jax.random.PRNGKey(50 + seed)
    raw, corrected = [], []
    for t in range(0, steps, CHUNK):
        state, info = chunk(state, key, jnp.int32(t), task.train_data, None)
        if t >= freeze:
            raw.append(np.asarray(info.kinetic, np.float64))
            damping = float(state.eps) * flat(state.friction)
            r, m = flat(state.momentum), flat(state.inv_mass)
            corrected.append(float(np.mean(r * r * m * (1.0 - damping / 2.0))))
    d = tree_size(state.position)
    return {"seed": seed, "t_kin": float(np.mean(np.concatenate(raw)) / d), "t_kin_corrected": float(np.mean(corrected)),
            "eps": float(state.eps), "gamma": float(state.gamma),
            "at_cap": int(np.sum(np.isclose(damping, T.MAX_DAMPING, rtol=1e-3))), "d": int(d)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sghmc_heat", description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="uci:power-plant/mlp-linear")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--json", default=None)
    ap.add_argument("--transient", type=int, default=None, metavar="G")
    a = ap.parse_args(argv)
    import tasks
    from tasks.task_strings import resolve_task

    task = tasks.build(resolve_task(a.task).spec)
    if a.transient is not None:
        rows = [transient_heat(task, a.transient, int(s)) for s in a.seeds.split(",")]
        for row in rows:
            print(f"seed {row['seed']}: ε {row['eps']:.3g}, γ {row['gamma']:.3g}, window T_kin {row['t_kin']:.3f}, "
                  f"corrected {row['t_kin_corrected']:.3f}, {row['at_cap']}/{row['d']} coordinates at the damping cap")
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"task": a.task, "G": a.transient, "rows": rows}, f, indent=1)
        return 0
    step = l2e.sghmc.build_kernel(task.posterior)
    chunk = jax.jit(make_chunk(lambda k, s, b, x: step(k, s, b, x["lr"], x["friction"]), task.sample_batch, BATCH,
                               CHUNK))
    rows = []
    for lr, friction in GRID:
        for seed in (int(s) for s in a.seeds.split(",")):
            for controlled in (False, True):
                row = {"lr": lr, "friction": friction, **run(task, chunk, lr, friction, seed, controlled)}
                rows.append(row)
                print(f"lr {lr:g} C {friction:g} seed {seed} {'controlled' if controlled else 'fixed     '}: window "
                      f"T_kin {row['t_kin']:.3g}, final lr {row['final_lr']:.2g} ({row['cuts']} cuts), predicted "
                      f"excess {row['predicted_excess']:.3g}, momentum relaxation 1/(εC) {row['relaxation_updates']:.3g} "
                      f"updates", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"task": a.task, "G": G, "window": WINDOW, "batch": BATCH, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
