"""`python -m evaluate curve`: budget curves of every method on every configured task with a NUTS reference that
keeps per-draw predictives (evaluate.curve.run), written as curve.json, curve.md and one PNG per task."""
from __future__ import annotations

import json
import time
from pathlib import Path

from base.io import ConfigError

__all__ = ["build_curve_parser", "curve_main", "load_curve_inputs", "run_curves"]


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values:
        raise ConfigError(f"{what} must not be empty")
    return values


def build_curve_parser():
    from cli import OneLineErrorParser
    from evaluate.cli_common import TASK_EPILOG
    from evaluate.curve.run import CurveConfig

    d = CurveConfig()
    p = OneLineErrorParser(prog="python -m evaluate curve", epilog=TASK_EPILOG,
                           description="Budget curves: every method's fidelity to a NUTS reference against its "
                                       "gradient budget, tuned once by validation NLL and by the oracle.")
    p.add_argument("--reference", default=None, help="reference directory (python -m evaluate reference) whose "
                   "tasks keep per-draw predictives (required unless --merge; with --merge: recompute each task's "
                   "floors from it and re-read every row against them, e.g. a run made before the floors held the "
                   "K-draw spread of the predictive variance or took TV against the other draws; one DIR is then "
                   "enough)")
    p.add_argument("--merge", action="append", default=[], metavar="DIR",
                   help="instead of running: pool the method rows of curve runs DIR (repeatable; same budgets, chain "
                        "allocations, seeds, tuning budget and floors) into one report in --output")
    p.add_argument("--replace", action="store_true",
                   help="with --merge: a method's rows in a later DIR replace its rows in an earlier one (a sampler "
                        "changed and re-run); without it, a method in two runs is an error")
    p.add_argument("--method", dest="user_methods", action="append", default=[], metavar="PKG.MODULE:NAME",
                   help="your own sampler: a factory (posterior, **hyperparameters) -> SamplingAlgorithm with an optional "
                        "grid attribute, or an evaluate.methods.Method, named NAME in PKG.MODULE on the Python path; "
                        "run beside the preset's methods (repeatable)")
    p.add_argument("--output", default="runs/curve", help="output directory (default: runs/curve)")
    p.add_argument("--preset", default="references", help="configuration preset (tasks, methods, K, grids; default: "
                   "references)")
    p.add_argument("--task", dest="tasks", action="append", default=[], metavar="NAME",
                   help="a task of the preset by report name (repeatable; default: every task the reference holds)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override an evaluation config field, e.g. --set methods=sghmc,baoab")
    p.add_argument("--budgets", default=",".join(map(str, d.budgets)), help="curve budgets G (default: %(default)s)")
    p.add_argument("--chains", default=",".join(map(str, d.chains)),
                   help="chain allocations M, each dividing K (default: %(default)s)")
    p.add_argument("--tune-budget", type=int, default=d.tune_budget, help="G of the one tuning run per grid point "
                   "(default: %(default)s)")
    p.add_argument("--seeds", default=",".join(map(str, d.seeds)), help="curve seeds (default: %(default)s)")
    p.add_argument("--sampler", default=None, help="the learned checkpoint of the `l2e` method (default: shipped "
                   "paper-form)")
    p.add_argument("--released", default=None, help="the L2E authors' released meta-parameters for method "
                   "l2e_released (a meta_params.pickle or its folder; default: l2e_released/ of $L2E_DATA_DIR, "
                   "else of ~/.cache/l2e)")
    p.add_argument("--overwrite", action="store_true", help="replace a curve report in --output")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def _warm_factory(cfg, cache):
    """warm(task, task_key, method, ensemble_hp) -> warm(cfg): the deep-ensemble start of a warm-started method at
    cfg's budget, the ensemble run with ensemble_hp (its lr tuned by the curve, evaluate.curve.run._ensemble_start;
    cfg.tune is False for the curves, so it is the one grid point run) and the method's own `chains` members."""
    import dataclasses

    from evaluate.run import _warm_start
    from evaluate.tuning import Progress

    def factory(task, task_key, method, ensemble_hp):
        def warm(run_cfg):
            de = dataclasses.replace(run_cfg.settings.deep_ensemble, lrs=(float(ensemble_hp["learning_rate"]),))
            at = dataclasses.replace(run_cfg, settings=dataclasses.replace(run_cfg.settings, deep_ensemble=de))
            return _warm_start(task, task_key, at, getattr(run_cfg.settings, method).chains, {}, cache, Progress())

        return warm

    return factory


def load_curve_inputs(cfg, reference_dir, names) -> dict:
    """{"tasks", "refs", "draws"} of the selected tasks, every file checked before anything runs: each task built,
    its reference read and checked against it (evaluate.reference.load_references), its per-draw predictives against
    the reference (tasks.reference.load_draws), more draws than the K per run (the K-draw floor takes K of them
    against the rest); ConfigError / ReferenceDataError otherwise."""
    from evaluate.reference import load_references
    from tasks import TaskCache, build
    from tasks.reference import load_draws

    all_names = cfg.task_names()
    tasks = {n: build(cfg.tasks[all_names.index(n)], TaskCache()) for n in names}
    refs = load_references({None: reference_dir}, names, [tasks[n] for n in names])
    draws = {n: load_draws(refs[n]["path"], tasks[n].kind, refs[n].get("probs")) for n in names}
    missing = [n for n in names if draws[n] is None]
    if missing:
        raise ConfigError(f"the reference of {', '.join(missing)} keeps no per-draw predictives (draw_probs.npz); "
                          "recompute it with `python -m evaluate reference`")
    for n in names:
        s = len(draws[n]["probs" if "probs" in draws[n] else "loc"])
        if s <= cfg.num_samples:
            raise ConfigError(f"the reference of {n} keeps {s} draws; the K-draw floor needs more than K = "
                              f"{cfg.num_samples} (num_samples)")
    return {"tasks": tasks, "refs": refs, "draws": draws}


def run_curves(cfg, curve, reference_dir, names, samplers: dict, progress=None, left_out: dict | None = None,
               inputs: dict | None = None) -> dict:
    """The curve results of the selected tasks (evaluate.curve.run.curve_task per task); samplers: the checkpoints
    the methods read (evaluate.run.load_samplers); left_out: {method: why} recorded as the result's "off_curve";
    inputs: `load_curve_inputs(cfg, reference_dir, names)` when already read (read here otherwise)."""
    from evaluate.curve.run import curve_task
    from evaluate.methods import CompileCache

    inputs = load_curve_inputs(cfg, reference_dir, names) if inputs is None else inputs
    tasks, refs, draws = inputs["tasks"], inputs["refs"], inputs["draws"]
    all_names = cfg.task_names()
    cache = CompileCache()
    out = {"k": cfg.num_samples, "curve": curve.__dict__, "methods": list(cfg.methods), "tasks": {}}
    if left_out:
        out["off_curve"] = dict(left_out)
    for n in names:
        t0 = time.perf_counter()
        out["tasks"][n] = curve_task(tasks[n], all_names.index(n), refs[n], draws[n], cfg, curve, cfg.methods,
                                     samplers, cache, progress, _warm_factory(cfg, cache))
        out["tasks"][n]["seconds"] = time.perf_counter() - t0
    return out


def _refloor(part: dict, reference_dir: str, where: str, cache: dict) -> dict:
    """A curve result whose tasks' floors are recomputed from the reference's draws (evaluate.curve.fidelity.floors,
    the same K and resamples; the reference must keep as many draws as the run's) and every row's gradients to floor
    re-read against them (evaluate.curve.fidelity.to_floor): a run made before the floors held the predictive
    variance's K-draw spread, or before the TV floor was taken against the other S − K draws."""
    from evaluate.curve.fidelity import floors
    from tasks.likelihoods import likelihood_of
    from tasks.reference import load_draws, read_json_index

    index = read_json_index(Path(reference_dir), f"reference directory {reference_dir}")
    for name, task in part["tasks"].items():
        old = task["floors"]
        key = (name, old["k"], old["resamples"], old["draws"])
        if key in cache:  # the same task in an earlier part: its floors are computed once
            task["floors"] = cache[key]
            _reread_rows(task)
            continue
        if name not in index:
            raise ConfigError(f"{where}: task {name!r} is not in the reference directory {reference_dir}")
        kind = index[name]["kind"]
        draws = load_draws(Path(reference_dir) / index[name]["dir"], kind)
        if draws is None:
            raise ConfigError(f"{where}: the reference of {name!r} keeps no per-draw predictives")
        lik = likelihood_of(kind)
        outputs = lik.reference_outputs(draws)
        if outputs.shape[0] != old["draws"]:
            raise ConfigError(f"{where}: {name!r}: the reference keeps {outputs.shape[0]} draws, the run's floors "
                              f"used {old['draws']} (another reference?)")
        task["floors"] = cache[key] = floors(lik, outputs, old["k"], old["resamples"])
        _reread_rows(task)
    return part


def _reread_rows(task: dict) -> None:
    """Every row's gradients to floor recomputed against the task's floors (evaluate.curve.fidelity.to_floor)."""
    from evaluate.curve.fidelity import to_floor

    for row in task["methods"].values():
        for choice in row["choices"].values():
            choice["to_floor"] = to_floor(choice["seeds"], task["floors"])


def _merge_main(args, out: Path) -> int:
    """--merge: read every DIR/curve.json, pool them (evaluate.curve.report.merge_results), write --output."""
    from cli import publish_dir, staging_dir
    from evaluate.curve.report import curve_document, curve_markdown, merge_results, plot_curves
    from base.io import atomic_write_text, one_line, read_json

    from cli import OutputLock
    from cli.outputs import check_output_dir
    from evaluate.report import probe_writable

    if len(args.merge) < (1 if args.reference else 2):
        raise ConfigError("--merge needs at least two curve runs (or one with --reference, to re-read it)")
    check_output_dir(out, "curve", "curve.json", args.overwrite, ConfigError)
    probe_writable(out, ConfigError)
    from evaluate.curve.schema import check_curve_result

    parts = [check_curve_result(read_json(Path(d) / "curve.json", f"curve run {d}"), str(Path(d) / "curve.json"))
             for d in args.merge]  # every field the merge and the report read, of its kind (evaluate.curve.schema)
    if args.reference:
        try:
            cache: dict = {}  # (task, K, resamples) -> floors, shared by the parts
            parts = [_refloor(p, args.reference, d, cache) for p, d in zip(parts, args.merge)]
        except (KeyError, TypeError, AttributeError) as e:
            raise ConfigError(f"cannot re-read {', '.join(args.merge)}: {type(e).__name__} {one_line(e)}") from None
    try:  # the pooled result rendered before anything is written: a part lacking a field is an input error
        results = merge_results(parts, replace=args.replace)
        merged = parts[0].get("merged") if len(parts) == 1 else None  # re-reading one merged run keeps its parts
        results["merged"] = list(merged or args.merge)
        if merged:
            results["merged_from"] = parts[0].get("merged_from", len(merged))
        if args.reference:
            results["reread_with"] = str(args.reference)
        curve_markdown(results)  # rendered once here: a part lacking a field fails before anything is written
    except ValueError as e:  # merge_results' refusals: another protocol, other floors, a method in two runs
        raise ConfigError(f"cannot merge {', '.join(args.merge)}: {one_line(e)}") from None
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        raise ConfigError(f"cannot merge {', '.join(args.merge)}: {type(e).__name__} {one_line(e)} (not the "
                          "curve.json of `python -m evaluate curve`)") from None
    lock = OutputLock(out, ConfigError)  # released by the CLI guard's failure cleanups if what follows fails
    stage = staging_dir(out)
    atomic_write_text(stage / "curve.json", json.dumps(results, indent=1, default=float))
    pngs = plot_curves(results, stage)
    replaced = sorted({m for t in results["tasks"].values() for m in t.get("replaced", [])})
    note = f" Rows of {', '.join(replaced)} from the later run replace the earlier." if replaced else ""
    if args.reference:
        note += (f" Every row re-read against the floors recomputed from {args.reference} (the predictive variance's "
                 "K-draw spread; TV against the other S − K draws).")
    head = (f"Merged from {', '.join(results['merged'])}." if len(results["merged"]) > 1
            else f"The run of {results['merged'][0]}.")
    atomic_write_text(stage / "curve.md", curve_document(results, pngs, head + note))
    publish_dir(stage, out, ("curve.json", "curve.md", *pngs), kind="curve")
    lock.release(failed=False)
    print(f"curves: {out / 'curve.md'} (merged {len(parts)} runs)")
    return 0


def _curve_methods(cfg, args) -> tuple:
    """(cfg, {method left out: why}, samplers) before anything runs: every checkpoint the methods read, loaded once
    (evaluate.run.load_samplers: an optional method whose file is missing is left out, as in the evaluation), and
    the methods without a budget curve (evaluate.curve.run.off_curve), each named on stdout; none left: ConfigError."""
    from evaluate.curve.run import off_curve
    from evaluate.run import load_samplers

    cfg, left_out, samplers = load_samplers(cfg, args.sampler, args.released)
    off = off_curve(cfg.methods)
    if len(off) == len(cfg.methods):
        raise ConfigError(f"no method with a budget curve: {', '.join(f'{m} is {why}' for m, why in off.items())}")
    left_out.update(off)
    for m, why in left_out.items():
        print(f"curve: {m} left out: {why}", flush=True)
    return cfg, left_out, samplers


def curve_main(argv) -> int:
    """`python -m evaluate curve ...`: every input checked before anything runs; one-line errors."""
    import dataclasses

    from cli import OutputLock, apply_overrides, handle_sigterm, publish_dir, staging_dir
    from cli.outputs import check_output_dir
    from evaluate.report import probe_writable
    from evaluate.cli_common import failed_run
    from evaluate.config import check_runs, get_preset
    from evaluate.curve.report import curve_document, plot_curves
    from evaluate.curve.run import CurveConfig
    from base.io import atomic_write_text
    from tasks.datasets import DatasetError

    args = build_curve_parser().parse_args(argv)
    out, lock = Path(args.output), None
    try:
        handle_sigterm()
        if args.merge:
            return _merge_main(args, out)
        if args.reference is None:
            raise ConfigError("--reference is required (or --merge DIR ... to pool finished curve runs)")
        from evaluate.cli_common import with_user_methods

        cfg = with_user_methods(apply_overrides(get_preset(args.preset), args.overrides), args.user_methods)
        curve = CurveConfig(budgets=_ints(args.budgets, "--budgets"), chains=_ints(args.chains, "--chains"),
                            tune_budget=args.tune_budget, seeds=_ints(args.seeds, "--seeds")).check(cfg.num_samples)
        check_runs(cfg, (*curve.budgets, curve.tune_budget), curve.chains, (*curve.seeds, curve.tune_seed))
        cfg = dataclasses.replace(cfg, seeds=None)
        from tasks.reference import read_json_index

        index = read_json_index(Path(args.reference), f"reference directory {args.reference}")
        names = [n for n in cfg.task_names() if n in index and (not args.tasks or n in args.tasks)]
        unknown = [t for t in args.tasks if t not in cfg.task_names()]
        if unknown or not names:
            raise ConfigError(f"no task to run: {', '.join(unknown) or 'the reference holds none of'} "
                              f"(the preset's tasks: {', '.join(cfg.task_names())})")
        cfg, left_out, samplers = _curve_methods(cfg, args)
        inputs = load_curve_inputs(cfg, args.reference, names)  # every task, reference and draw file, checked
        check_output_dir(out, "curve", "curve.json", args.overwrite, ConfigError)
        probe_writable(out, ConfigError)
        lock = OutputLock(out, ConfigError)  # a second run on this --output is refused (cli.outputs)
        progress = None if args.quiet else (lambda line: print(f"curve: {line}", flush=True))
        t0 = time.perf_counter()
        results = run_curves(cfg, curve, args.reference, names, samplers, progress, left_out, inputs)
        results["seconds"] = time.perf_counter() - t0
        stage = staging_dir(out)
        atomic_write_text(stage / "curve.json", json.dumps(results, indent=1, default=float))
        pngs = plot_curves(results, stage)
        atomic_write_text(stage / "curve.md", curve_document(results, pngs))
        publish_dir(stage, out, ("curve.json", "curve.md", *pngs), kind="curve")
        lock.release(failed=False)
    except (KeyboardInterrupt, ConfigError, DatasetError, ValueError, OSError) as e:
        return failed_run(e, lock, f"{args.output} is unchanged")
    print(f"curves: {out / 'curve.md'} ({results['seconds']:.0f} s)")
    return 0
