"""Budget curves: every method's fidelity to a NUTS reference as a function of its gradient budget G.

For each task with a reference that keeps per-draw predictives (tasks.reference.load_draws), each method and each
chain allocation M (CurveConfig.chains; 1 only for a method without chain allocation):

1. Tuning, once, at G = tune_budget with K draws and the tuning keys of seed `tune_seed` (evaluate.tuning.run_keys
   phase 0): one run per grid point; its kept samples are scored on the first tune_examples inner-validation
   examples (`task.score`, the protocol's validation rule) and on the test split against the reference (the
   oracle rule: TV / TV floor + E² / E² floor, the grid point closest to the reference itself), the grid extended at an
   edge for each rule as the evaluation does (cfg.extend_grid). A run with a divergent chain scores +inf under both.
   The gradients of every tuning run are the tuning-inclusive addend.
2. For each choice ("validation", "oracle") and each seed, one run per budget G with the final-run keys (phase 1)
   of that seed's task key (fold_in(PRNGKey(seed), t), as `python -m evaluate`): TV and E² to the reference (its
   every kept draw, on the test points it keeps them on: all, or `evaluate reference --keep-rows`), agreement, the dispersion ratios (evaluate.dispersion), T_kin, divergent chains, gradients
   (a warm-started method's deep-ensemble members counted) and seconds. The two choices share runs when they pick
   the same grid point.
   A warm-started method (SMILE, pSMILE: Method.warm_start) starts every run from the deep ensemble at its best:
   the ensemble's lr grid is tuned once per task at G = tune_budget by both rules (`_ensemble_start`, as in step 1;
   the ensemble has no chain allocation, so one tuning serves every M), and each run's ensemble (at that run's
   budget and keys) uses the oracle-chosen lr, for both choices of the row: the warm start is an input of the
   rival, given at its best, and the row's two choices then differ only in the method's own hyperparameters (one
   grid of them, scored from one start). So a warm-started row's validation choice is not reference-free; the
   ensemble's validation-chosen lr is recorded beside it (tuning.warm_start). The ensemble grid's gradients are
   added to the row's tuning-inclusive addend (each warm-started row pays them, as if run alone).
3. Gradients to reach 1.1 × the K-draw floor on TV and on E² (evaluate.curve.fidelity), per seed, and their mean ±
   standard error over the seeds that reach it.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable

import jax
import numpy as np

from evaluate.curve.fidelity import energy_distance, floors, pairwise_mean, to_floor
from evaluate.dispersion import dispersion_entry
from evaluate.methods import get_method, run_many, run_method, split_data
from evaluate.methods.outputs import predict_outputs
from evaluate.methods.registry import allocated_chains
from evaluate.metrics import agreement
from evaluate.run import method_extra
from evaluate.tuning import hp_label, run_keys, search
from base.io import ConfigError
from tasks.likelihoods import categorical

__all__ = ["CHOICES", "CurveConfig", "WARM_RULE", "curve_task", "has_curve", "off_curve"]

CHOICES = ("validation", "oracle")
WARM_RULE = "oracle"
"""The rule whose deep-ensemble lr a warm-started method starts from on the curves (module docstring)."""


@dataclasses.dataclass(frozen=True)
class CurveConfig:
    """budgets: the G of each curve point (minibatch gradients); chains: the chain allocations M to run (each must
    divide the evaluation's num_samples K; a method without chain allocation runs M = 1 only); tune_budget: the G
    at which the grid is tuned once; tune_seed: the seed whose tuning keys the grid runs use; seeds: the seeds of
    the curves."""

    budgets: tuple[int, ...] = (250, 500, 1000, 2000, 4000, 8000, 16000, 32000)
    chains: tuple[int, ...] = (1, 10)
    tune_budget: int = 2000
    tune_seed: int = 0
    seeds: tuple[int, ...] = (0, 1, 2)

    def check(self, k: int) -> "CurveConfig":
        """self, or ConfigError for budgets / chains that do not fit K draws per run."""
        if not self.budgets or any(g <= 0 or g % k for g in self.budgets) or list(self.budgets) != sorted(
                set(self.budgets)):
            raise ConfigError(f"budgets must be increasing positive multiples of num_samples ({k}), got {self.budgets}")
        if not self.chains or any(m <= 0 or k % m for m in self.chains):
            raise ConfigError(f"chains must divide num_samples ({k}), got {self.chains}")
        if self.tune_budget <= 0 or self.tune_budget % k:
            raise ConfigError(f"tune_budget must be a positive multiple of num_samples ({k}), got {self.tune_budget}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds must be distinct, got {self.seeds}")
        return self


def has_curve(method: str) -> bool:
    """Whether `curve_task` runs `method`: every minibatch method, and a full-batch one that declares
    Method.curve_budget (not NUTS-BDE: its cost per draw is set by the trees NUTS builds, not by a budget)."""
    m = get_method(method)
    return not m.full_batch or m.curve_budget is not None


def off_curve(methods) -> dict[str, str]:
    """{method: why it has no budget curve} for the methods of `methods` that `has_curve` refuses."""
    return {m: "full-batch with no curve budget (its cost per draw is its own, not a budget's)" for m in methods
            if not has_curve(m)}


class _Reference:
    """A task's reference as the curves use it: per-draw outputs, their vectors and within-set mean distance, the
    dispersion statistics and the K-draw floors."""

    def __init__(self, task, ref: dict, draws: dict, k: int):
        lik = task.likelihood
        self.likelihood, self.entry = lik, ref
        self.outputs = lik.reference_outputs(draws)
        self.rows = draws.get("rows")  # the test points the draws are on (None: every point)
        n = int(np.asarray(task.splits.test[1]).shape[0])
        if self.rows is not None and (self.rows.size and self.rows[-1] >= n):
            raise ConfigError(f"{task.spec.name}: the reference's draws are on test points up to {self.rows[-1]}, "
                              f"the task has {n}")
        self.vectors = lik.draw_vectors(self.outputs)
        self.within = pairwise_mean(self.vectors)
        self.floors = floors(lik, self.outputs, k)
        self.bma = categorical.bma_probs(self.outputs) if lik.has_class_probs else None

    def point(self, task, res) -> dict:
        """TV, E², agreement, dispersion ratios, T_kin and divergence of one run's result on the test split."""
        if res.num_finite == 0:
            return {"tv": None, "energy": None, "agreement": None, "ratios": None, "t_kin": None}
        outs = res.outputs if self.rows is None else res.outputs[:, self.rows]
        out = {"tv": self.likelihood.bma_total_variation(outs, self.outputs),
               "energy": energy_distance(self.likelihood.draw_vectors(outs), self.vectors, self.within),
               "agreement": None if self.bma is None else agreement(categorical.bma_probs(outs), self.bma)}
        disp = dispersion_entry(task, res, self.entry)
        out["ratios"] = None if disp is None else {k: disp["ratios"][k] for k in (
            "weight_norm", disp["pairwise_compared"], "predictive_variance")}
        t_kin = [t for t in (res.t_kin or []) if t is not None]
        out["t_kin"] = float(np.mean(t_kin)) if t_kin else None
        return out

    def oracle_score(self, point: dict) -> float:
        if point["tv"] is None:
            return math.inf
        return point["tv"] / self.floors["tv"]["median"] + point["energy"] / max(self.floors["energy"]["median"],
                                                                                 1e-12)


def _budgeted(task, method: str, cfg):
    """cfg with a full-batch method's settings scaled to cfg's budget (Method.curve_budget); cfg itself otherwise."""
    scale = get_method(method).curve_budget
    if scale is None:
        return cfg
    settings = scale(getattr(cfg.settings, method), cfg, task.data_size)
    return dataclasses.replace(cfg, settings=dataclasses.replace(cfg.settings, **{method: settings}))


def _spent(task, res, added: dict, batch_size: int) -> int:
    """The gradients a run counts, in minibatch gradients of B = batch_size examples: its own (a full-batch gradient
    is N/B of them) plus its warm start's deep-ensemble members."""
    own = res.grad_evals if res.gradient != "full-batch" else round(res.grad_evals * task.data_size / batch_size)
    return int(own) + (added.get("warm_start", {}).get("grad_evals", 0) if added else 0)


def _run(task, task_key, method: str, hp: dict, cfg, cache, extra: dict, warm: Callable | None) -> tuple:
    """(MethodResult on test, gradients counted): one final-keys run; a warm-started method gets its deep-ensemble
    start from `warm(cfg)` and its members' gradients are added."""
    added = {}
    if warm is not None:
        added = warm(cfg)
    res = run_method(method, task, run_keys(task_key, 1), {**hp, **extra, **added}, _budgeted(task, method, cfg),
                     "test", cache)
    return res, _spent(task, res, added, cfg.batch_size)


def _tune(task, task_key, method: str, cfg, cache, extra: dict, ref: _Reference, warm,
          width: int | None = None) -> dict:
    """The grid at cfg's budget (with cfg.extend_grid, the bounded edge extension of evaluate.tuning, for each
    rule): each point's validation and oracle score; the point each rule picks; what the runs cost. A one-point grid
    (a tuning-free method, e.g. Transient-L2E's single multiplier 1) is not run: both rules take it, at no cost."""
    m = get_method(method)
    points = m.points(getattr(cfg.settings, method))
    if len(points) == 1:  # a one-point grid chooses nothing: tuning-free, no run, nothing to pay
        return {"grid": [], "validation": points[0], "oracle": points[0], "extended": {}, "runs": 0, "gradients": 0,
                "budget": None}
    x, y = split_data(task, "inner_valid")
    xv, yv = x[:cfg.tune_examples], np.asarray(y[:cfg.tune_examples])
    rows, spent = {}, [0]

    def record(point, label, res, added):
        spent[0] += _spent(task, res, added, cfg.batch_size)
        bad = res.divergent_chains or res.num_finite == 0
        val = math.inf if bad else task.score(predict_outputs(task, res.samples, xv, cfg.eval_batch, cache), yv)
        fid = ref.point(task, res)
        orc = math.inf if bad else ref.oracle_score(fid)
        rows[label] = {"point": point, "label": label, "validation": val if math.isfinite(val) else None,
                       "oracle": orc if math.isfinite(orc) else None, "tv": fid["tv"], "energy": fid["energy"],
                       "divergent_chains": res.divergent_chains}

    def row(point):
        label = hp_label(point) or "default"
        if label not in rows:
            added = warm(cfg) if warm is not None else {}
            hp = {**point, **extra, **added}
            record(point, label, run_method(method, task, run_keys(task_key, 0), hp, _budgeted(task, method, cfg),
                                            "test", cache) if warm is not None else run_many(
                method, task, [(run_keys(task_key, 0), hp)], _budgeted(task, method, cfg), "test", cache, width)[0],
                   added)
        return rows[label]

    if warm is None:  # the grid (search visits every point) in batched calls; an extension point on its own
        todo = list({hp_label(p) or "default": p for p in points}.items())
        results = run_many(method, task, [(run_keys(task_key, 0), {**p, **extra}) for _, p in todo],
                           _budgeted(task, method, cfg), "test", cache, width)
        for (label, point), res in zip(todo, results):
            record(point, label, res, {})

    def score(key):
        return lambda point: row(point)[key] if row(point)[key] is not None else math.inf

    chosen = {key: search(points, score(key), extend=cfg.extend_grid) for key in CHOICES}
    return {"grid": list(rows.values()), "validation": chosen["validation"].best, "oracle": chosen["oracle"].best,
            "extended": {key: t.extended for key, t in chosen.items()}, "runs": len(rows), "gradients": spent[0],
            "budget": cfg.num_steps}


def _ensemble_start(task, tune_key, cfg, curve: CurveConfig, cache, ref: _Reference, store: dict, say) -> dict:
    """The deep ensemble a warm-started method starts from, at its best: its lr grid run once at G = tune_budget
    and scored by both rules (`_tune`, grid extension as cfg.extend_grid), the start at the WARM_RULE choice; kept in
    `store` (one per task, shared by the warm-started rows). {"method", "rule", "hp", "tuning"}."""
    if "start" not in store:
        t0 = time.perf_counter()
        tuning = _tune(task, tune_key, "deep_ensemble", dataclasses.replace(cfg, num_steps=curve.tune_budget), cache,
                       {}, ref, None)
        store["start"] = {"method": "deep_ensemble", "rule": WARM_RULE, "hp": tuning[WARM_RULE], "tuning": tuning}
        say(f"{task.spec.name} deep_ensemble (warm start): tuned ({len(tuning['grid'])} points, "
            f"{time.perf_counter() - t0:.0f} s): {WARM_RULE} {hp_label(tuning[WARM_RULE])}, validation "
            f"{hp_label(tuning['validation'])}")
    return store["start"]


def curve_task(task, task_index: int, ref_entry: dict, draws: dict, cfg, curve: CurveConfig, methods, samplers: dict,
               cache, progress: Callable[[str], None] | None = None, warm_factory: Callable | None = None) -> dict:
    """The curves of one task (module docstring): {"floors", "methods": {row name: {...}}}.

    Args:
      task: the built task; task_index: its index t in the evaluation config (task keys fold_in(PRNGKey(seed), t));
      ref_entry: its evaluate.reference.load_references entry; draws: tasks.reference.load_draws of it;
      cfg: the EvalConfig (K = num_samples, batch size, settings, tune_examples); curve: CurveConfig;
      methods: method names; samplers: what evaluate.run.method_extra reads (evaluate.run.load_samplers);
      cache: a CompileCache; progress: called with one line per run; warm_factory(task, task_key, method,
        ensemble_hp) -> warm(cfg) for warm-started methods (the start of `method` from the deep ensemble run with
        ensemble_hp at that cfg's budget), None to skip them.
    Returns:
      {"floors", "methods": {name or name@M=m: {"method", "chains", "tuning", "settings" (the method's validated
      settings that ran), "choices": {choice: {"hp", "ran" (the first run's hyperparameter record: what ran, e.g. a
      learned sampler's configuration after its overrides), "seeds": {seed: [points]}, "to_floor": {"tv": summary,
      "energy": summary}}}}}}; a warm-started row's tuning holds
      "warm_start" (`_ensemble_start`) and its "gradients" include the ensemble grid's.
    """
    ref = _Reference(task, ref_entry, draws, cfg.num_samples)
    out = {"floors": ref.floors, "methods": {}}
    say = progress or (lambda line: None)
    ensemble: dict = {}  # the warm start's tuned deep ensemble, once per task
    for method in methods:
        m = get_method(method)
        if not has_curve(method) or (m.warm_start and warm_factory is None):
            continue
        extra = method_extra(method, samplers)
        for chains in sorted({c if allocated_chains(method, dataclasses.replace(cfg, chains=c)) > 1 else 1
                              for c in curve.chains}):
            name = method if chains == 1 else f"{method}@M={chains}"
            base = dataclasses.replace(cfg, chains=chains, thinning=None, tune=False)
            tune_key = jax.random.fold_in(jax.random.PRNGKey(curve.tune_seed), task_index)
            start = _ensemble_start(task, tune_key, base, curve, cache, ref, ensemble, say) if m.warm_start else None
            warm_of = None if start is None else (
                lambda key, method=method, hp=start["hp"]: warm_factory(task, key, method, hp))
            t0 = time.perf_counter()
            tuning = _tune(task, tune_key, method, dataclasses.replace(base, num_steps=curve.tune_budget), cache,
                           extra, ref, None if start is None else warm_of(tune_key),
                           len(curve.seeds) * base.chains) if m.tuned else {
                "grid": [], "validation": {}, "oracle": {}, "gradients": 0, "budget": None}
            if start is not None:  # the ensemble grid is part of what tuning this row cost
                tuning.update(gradients=tuning["gradients"] + start["tuning"]["gradients"], warm_start=start)
            say(f"{task.spec.name} {name}: tuned ({len(tuning['grid'])} points, {time.perf_counter() - t0:.0f} s)")
            row = {"method": method, "chains": chains, "tuning": tuning, "choices": {},
                   "settings": record_of(dataclasses.asdict(getattr(cfg.settings, method)))}
            hps = {hp_label(tuning[choice]): tuning[choice] for choice in CHOICES}  # the choices share equal points
            done = _curves(task, task_index, method, hps, base, curve, cache, extra, ref, warm_of, say, name)
            for choice in CHOICES:
                row["choices"][choice] = {"hp": tuning[choice], **done[hp_label(tuning[choice])]}
            out["methods"][name] = row
    return out


def _curves(task, task_index, method, hps: dict, base, curve: CurveConfig, cache, extra, ref: _Reference, warm_of,
            say, name) -> dict:
    """{label: {"seeds", "to_floor"}} for each hyperparameter point of `hps` ({label: hp}): every seed's runs at
    every budget, each budget's (point, seed) runs as one batched call (registry.run_many); warm_of(task_key) ->
    warm(cfg) for a warm-started method (then one run at a time), else None."""
    keys = {seed: jax.random.fold_in(jax.random.PRNGKey(seed), task_index) for seed in curve.seeds}
    warms = {seed: warm_of(keys[seed]) for seed in curve.seeds} if warm_of is not None else None
    jobs = [(label, seed) for label in hps for seed in curve.seeds]
    seeds: dict = {label: {str(seed): [] for seed in curve.seeds} for label in hps}
    ran: dict = {}
    for g in curve.budgets:
        cfg = dataclasses.replace(base, num_steps=g)
        t0 = time.perf_counter()
        if warms is None:
            runs = run_many(method, task, [(run_keys(keys[seed], 1), {**hps[label], **extra}) for label, seed in jobs],
                            _budgeted(task, method, cfg), "test", cache, width=len(curve.seeds) * base.chains)
            runs = [(res, _spent(task, res, {}, cfg.batch_size)) for res in runs]
        else:
            runs = [_run(task, keys[seed], method, hps[label], cfg, cache, extra, warms[seed]) for label, seed in jobs]
        for (label, seed), (res, spent) in zip(jobs, runs):
            ran.setdefault(label, record_of(res.hyperparameters))  # what ran (its first run's own record)
            seeds[label][str(seed)].append({"budget": g, "gradients": spent, "seconds": res.seconds,
                                            "divergent_chains": res.divergent_chains, **ref.point(task, res)})
            say(f"{task.spec.name} {name} {label or 'default'} seed {seed} G={g}: tv "
                f"{seeds[label][str(seed)][-1]['tv']} ({(time.perf_counter() - t0) / len(runs):.1f} s)")
    return {label: {"seeds": per, "to_floor": to_floor(per, ref.floors), "ran": ran.get(label)}
            for label, per in seeds.items()}


def record_of(value):
    """The JSON part of a run's hyperparameter record (MethodResult.hyperparameters): numbers, strings, booleans,
    None, lists and dicts of them (tuples as lists, numpy scalars as numbers); arrays and other objects (meta-
    parameters, a warm start's positions) left out."""
    if isinstance(value, dict):
        return {str(k): record_of(v) for k, v in value.items() if _is_json(v)}
    if isinstance(value, (list, tuple)):
        return [record_of(v) for v in value if _is_json(v)]
    return value.item() if isinstance(value, np.generic) else value


def _is_json(value) -> bool:
    if isinstance(value, (dict, list, tuple)):
        return True
    return value is None or isinstance(value, (str, bool, int, float, np.generic))
