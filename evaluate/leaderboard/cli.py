"""`python -m evaluate leaderboard`: the budget curves of the core methods on the held-out half of the zoo, task by
task (each task's result saved as it finishes; a rerun of the same configuration resumes), aggregated into
leaderboard.json / leaderboard.md and the performance-profile PNGs.

    python -m evaluate leaderboard --reference results/references --output DIR [--methods m1,m2,...]
        [--method pkg.module:NAME ...] [--task NAME ...] [--allow-train] [--budgets 250,...,8000] [--extend 32000]
        [--chains 1,10] [--seeds 0,1,2] [--tune-budget 2000] [--overwrite] [--quiet]

Bad input is one `error:` line on stderr and exit status 2, before anything is written.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import time
from pathlib import Path

from base.io import ConfigError

__all__ = ["KIND", "build_parser", "leaderboard_inputs", "leaderboard_main"]

KIND = "leaderboard"
"""The output marker kind (cli.outputs.KINDS) of a leaderboard directory (budget curves, one file per task, and the
tables)."""


def build_parser():
    """The argument parser of `python -m evaluate leaderboard`."""
    from cli import OneLineErrorParser
    from evaluate.curve.run import CurveConfig
    from evaluate.leaderboard import CORE_METHODS, DEFAULT_BUDGETS, DEFAULT_EXTEND

    d = CurveConfig()
    p = OneLineErrorParser(prog="python -m evaluate leaderboard",
                           description="Budget curves of the core methods on the zoo's held-out half, aggregated "
                                       "into one leaderboard (resumable, task by task).")
    p.add_argument("--reference", help="the zoo's reference directory (python -m evaluate reference --suite zoo; "
                   "required unless --merge); a task is run when it holds its reference converged by the zoo's rule")
    p.add_argument("--output", required=True, help="leaderboard directory (tasks/<task>.json, leaderboard.json, "
                   "leaderboard.md, profile_*.png); an unfinished one of the same configuration is resumed")
    p.add_argument("--methods", default=",".join(CORE_METHODS), help="comma-separated methods (default: the core "
                   "list, %(default)s)")
    p.add_argument("--method", dest="user_methods", action="append", default=[], metavar="PKG.MODULE:NAME",
                   help="your own sampler, run beside --methods (repeatable; as for `python -m evaluate curve`)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override an evaluation config field, e.g. --set settings.policy_learned.chains=4 (recorded in "
                        "the configuration: a resume repeats it; boards of other overrides do not merge)")
    p.add_argument("--task", dest="tasks", action="append", default=[], metavar="NAME",
                   help="a zoo task name (repeatable; default: the held-out half)")
    p.add_argument("--allow-train", action="store_true", help="allow --task to name a task of the meta-training "
                   "half (the leaderboard is for the held-out half)")
    p.add_argument("--budgets", default=",".join(map(str, DEFAULT_BUDGETS)), help="curve budgets G (default: "
                   "%(default)s)")
    p.add_argument("--extend", type=int, default=DEFAULT_EXTEND, help="where no row solves any seed of a task by "
                   "the largest budget, continue its curves at this budget (0: never; default: %(default)s)")
    p.add_argument("--chains", default=",".join(map(str, d.chains)), help="chain allocations M (default: "
                   "%(default)s)")
    p.add_argument("--seeds", default=",".join(map(str, d.seeds)), help="curve seeds (default: %(default)s)")
    p.add_argument("--tune-budget", type=int, default=d.tune_budget, help="G of the one tuning run per grid point "
                   "(default: %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="discard a leaderboard in --output and start again")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: rewrite leaderboard.json / .md and the profiles from the finished tasks of the "
                        "held-out half selected now (same configuration as the run's)")
    p.add_argument("--merge", action="append", default=[], metavar="DIR",
                   help="run nothing: merge leaderboard directories of disjoint method lists on the same tasks and "
                        "settings into --output (repeatable, at least two; evaluate/leaderboard/merge.py)")
    return p


def _method_names(args) -> list[str]:
    """The methods: --methods (each registered, with a budget curve), then --method's names."""
    from evaluate.curve.run import has_curve
    from evaluate.methods import get_method
    from evaluate.methods.registry import EXTRA_ENTRIES

    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not names:
        raise ConfigError("--methods must name at least one method")
    for entry in args.user_methods:
        if entry.strip() not in EXTRA_ENTRIES:
            raise ConfigError(f"--method {entry}: not registered in this process; set L2E_METHODS={entry} when "
                              "running `python -m evaluate leaderboard`")
    for m in names:
        get_method(m)  # ConfigError: unknown method, naming the known ones
        if not has_curve(m):
            raise ConfigError(f"method {m!r} has no budget curve (full-batch with no curve budget)")
    if len(set(names)) != len(names):
        raise ConfigError(f"--methods names {next(m for m in names if names.count(m) > 1)!r} twice")
    return names


def _curve_config(args, cfg):
    """(cfg with seeds None, CurveConfig, extend budget) checked: every budget, allocation and seed a run makes."""
    from evaluate.config import check_runs
    from evaluate.curve.cli import _ints
    from evaluate.curve.run import CurveConfig

    curve = CurveConfig(budgets=_ints(args.budgets, "--budgets"), chains=_ints(args.chains, "--chains"),
                        tune_budget=args.tune_budget, seeds=_ints(args.seeds, "--seeds")).check(cfg.num_samples)
    if args.extend < 0 or (args.extend and (args.extend <= curve.budgets[-1] or args.extend % cfg.num_samples)):
        raise ConfigError(f"--extend must be 0 or a multiple of num_samples ({cfg.num_samples}) above the largest "
                          f"budget {curve.budgets[-1]}, got {args.extend}")
    check_runs(cfg, (*curve.budgets, curve.tune_budget, *([args.extend] if args.extend else [])), curve.chains,
               (*curve.seeds, curve.tune_seed))
    return dataclasses.replace(cfg, seeds=None), curve, args.extend


def leaderboard_inputs(args) -> dict:
    """Everything a run needs, every input checked before anything is written: {"cfg" (the preset with every zoo
    task, in ZOO order, so that a task's key index is its ZOO index whatever is selected, and the methods), "curve",
    "conf" (the configuration record a resume must share), "names", "skipped", "created"}."""
    from cli import apply_overrides
    from evaluate.cli_common import with_task_strings, with_user_methods
    from evaluate.config import get_preset
    from evaluate.leaderboard import PRESET
    from evaluate.leaderboard.select import select_tasks
    from evaluate.leaderboard.store import FORMAT
    from tasks.zoo import ZOO

    methods = _method_names(args)
    cfg = with_task_strings(get_preset(PRESET), [e.task for e in ZOO], None)
    cfg = with_user_methods(dataclasses.replace(cfg, methods=tuple(methods)), args.user_methods)
    cfg = apply_overrides(cfg, list(args.overrides))
    cfg, curve, extend = _curve_config(args, cfg)
    names, skipped, created = select_tasks(args.reference, args.tasks, args.allow_train)
    conf = {"format": FORMAT, "preset": PRESET, "methods": list(cfg.methods), "user_methods": list(args.user_methods),
            "budgets": list(curve.budgets), "extend": extend, "chains": list(curve.chains),
            "seeds": list(curve.seeds), "tune_budget": curve.tune_budget, "tune_seed": curve.tune_seed,
            "k": cfg.num_samples, "reference": os.path.normpath(args.reference)}
    if args.overrides:  # only then: the boards written before --set existed keep their configuration
        conf["overrides"] = list(args.overrides)
    return {"cfg": cfg, "curve": curve, "conf": conf, "names": names, "skipped": skipped, "created": created}


def check_output(out: Path, conf: dict, overwrite: bool) -> dict | None:
    """The configuration a leaderboard in `out` holds (None: a new directory, or --overwrite); ConfigError for a
    dangling link, a file, a directory never ours, one holding another output of ours (a `python -m evaluate curve`
    run included) or entries we did not write, and a leaderboard of another configuration without --overwrite."""
    from cli.outputs import KINDS, check_ours, read_marker, refuse_never_ours
    from evaluate.leaderboard.store import config_differences, read_configuration

    if out.is_symlink() and not out.exists():
        raise ConfigError(f"--output {out} is a dangling symbolic link (to {os.readlink(out)})")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--output {out} exists and is not a directory")
    refuse_never_ours(out, ConfigError, "write a leaderboard into it")
    if not out.is_dir():
        return None
    found = read_marker(out)
    if found in KINDS and found != KIND:
        raise ConfigError(f"--output {out} holds {KINDS[found]}, not a leaderboard; choose another --output")
    check_ours(out, KIND, ConfigError, "write a leaderboard into it")
    old = read_configuration(out) if found == KIND else None
    if found == KIND and old is None and any(p.name != ".l2e-output" for p in out.iterdir()):
        if not overwrite:
            raise ConfigError(f"--output {out} holds a damaged leaderboard (no configuration.json); pass --overwrite "
                              "or choose another --output")
    if old is not None and not overwrite:
        diff = config_differences(old, conf)
        if diff:
            raise ConfigError(f"--output {out} holds a leaderboard of another configuration (differs in "
                              f"{', '.join(diff)}); pass --overwrite to start again or choose another --output")
    return None if overwrite else old


def _say(args):
    return (lambda line: None) if args.quiet else (lambda line: print(f"leaderboard: {line}", flush=True))


def _run_task(name: str, state: dict, say) -> dict:
    """One task's record: its curves (evaluate.curve.cli.run_curves), continued at the extend budget when no row
    solves any seed by the largest budget (evaluate.leaderboard.store.extend_result)."""
    from evaluate.curve.cli import run_curves
    from evaluate.leaderboard.store import FORMAT, extend_result, solved_any

    cfg, curve, conf = state["cfg"], state["curve"], state["conf"]
    t0 = time.perf_counter()
    run = (lambda c: run_curves(cfg, c, conf["reference"], [name], state["samplers"], say, state["left_out"],
                                state["inputs"])["tasks"][name])
    task, extended = run(curve), None
    if conf["extend"] and not solved_any(task):
        say(f"{name}: no row solves any seed by G = {curve.budgets[-1]}; continuing the curves at G = "
            f"{conf['extend']}")
        task, extended = extend_result(task, run(dataclasses.replace(curve, budgets=(conf["extend"],))),
                                       conf["extend"])
    return {"format": FORMAT, "task": name, "configuration": conf, "reference_created": state["created"][name],
            "result": task, "extended": extended, "seconds": time.perf_counter() - t0}


def write_aggregate(out: Path, state: dict, finished: dict) -> Path:
    """leaderboard.json, leaderboard.md and the profile PNGs of the finished tasks among the selected (each file
    written atomically); a run with tasks still to go is marked partial. Returns leaderboard.md's path."""
    import json

    from base.io import atomic_write_text
    from evaluate.leaderboard.aggregate import leaderboard
    from evaluate.leaderboard.report import leaderboard_markdown, plot_profiles
    from tasks.zoo import DATA_SIZES, by_name, families

    names = [n for n in state["names"] if n in finished]
    zoo = by_name()
    doc = {"configuration": state["conf"], "tasks": names, "skipped": state["skipped"],
           "extended": {n: finished[n]["extended"] for n in names if finished[n]["extended"]},
           "extension_dropped": {n: finished[n]["extension_dropped"] for n in names
                                 if finished[n].get("extension_dropped")},
           "left_out": state["left_out"], "command": state["command"],
           "seconds": {"curves": sum(finished[n]["seconds"] for n in names),
                       "this_run": time.perf_counter() - state["t0"]},
           "task_seconds": {n: finished[n]["seconds"] for n in names},
           "partial": (f"{len(names)} of {len(state['names'])} tasks finished"
                       if len(names) < len(state["names"]) else None)}
    doc.update(leaderboard({n: finished[n]["result"] for n in names},
                           {n: families(zoo[n], DATA_SIZES[n]) for n in names}))
    pngs = plot_profiles(doc, out)
    atomic_write_text(out / "leaderboard.json", json.dumps(doc, indent=1, default=float))
    return atomic_write_text(out / "leaderboard.md", leaderboard_markdown(doc, pngs))


def _prepare(args, out: Path) -> dict:
    """The run's state, every input checked (nothing written): inputs, output, checkpoints, finished tasks, the
    curve inputs of the tasks to run."""
    from evaluate.curve.cli import load_curve_inputs
    from evaluate.curve.run import off_curve
    from evaluate.leaderboard.store import load_finished
    from evaluate.report import probe_writable
    from evaluate.run import load_samplers

    state = leaderboard_inputs(args)
    old = check_output(out, state["conf"], args.overwrite)
    probe_writable(out, ConfigError)
    cfg, left_out, samplers = load_samplers(state["cfg"], None, None)
    left_out.update(off_curve(cfg.methods))
    finished = load_finished(out, state["names"], state["conf"], state["created"]) if old is not None else {}
    todo = [n for n in state["names"] if n not in finished]
    state.update(cfg=cfg, left_out=left_out, samplers=samplers, finished=finished, todo=todo,
                 inputs=load_curve_inputs(cfg, state["conf"]["reference"], todo) if todo and not args.report_only
                 else None)
    return state


def merge_main(args, argv, say) -> int:
    """The --merge form of `python -m evaluate leaderboard`: every input checked before --output is written."""
    from cli import OutputLock, write_marker
    from evaluate.leaderboard.merge import merge_runs
    from evaluate.leaderboard.store import clear, write_configuration, write_task
    from tasks.zoo import ZOO

    t0 = time.perf_counter()
    out = Path(args.output)
    if any(Path(m).resolve() == out.resolve() for m in args.merge):
        raise ConfigError(f"--output {out} is one of the --merge directories")
    conf, records = merge_runs(args.merge)
    check_output(out, conf, args.overwrite)
    lock = OutputLock(out, ConfigError, KIND)
    if args.overwrite:
        clear(out)
    write_marker(out, KIND)
    write_configuration(out, conf)
    for record in records.values():
        write_task(out, record)
    order = [e.name for e in ZOO]
    names = sorted(records, key=lambda n: order.index(n) if n in order else len(order))
    state = {"conf": conf, "names": names, "skipped": {}, "left_out": {}, "t0": t0,
             "command": "python -m evaluate leaderboard " + shlex.join(argv)}
    md = write_aggregate(out, state, records)
    lock.release(failed=False)
    say(f"merged {len(names)} tasks of {len(args.merge)} runs ({len(conf['methods'])} methods) into {md}")
    return 0


def leaderboard_main(argv) -> int:
    """`python -m evaluate leaderboard ...`: every input checked before anything is written; one-line errors."""
    from cli import OutputLock, handle_sigterm, write_marker
    from evaluate.cli_common import failed_run
    from evaluate.leaderboard.store import clear, write_configuration, write_task
    from tasks.datasets import DatasetError

    args = build_parser().parse_args(argv)
    out, lock, t0 = Path(args.output), None, time.perf_counter()
    say = _say(args)
    try:
        handle_sigterm()
        if args.merge:
            return merge_main(args, argv, say)
        if not args.reference:
            raise ConfigError("--reference is required (unless --merge)")
        state = _prepare(args, out)
        run_argv = [a for a in argv if a != "--report-only"]
        state.update(t0=t0, command="python -m evaluate leaderboard " + shlex.join(run_argv))
        lock = OutputLock(out, ConfigError, KIND)
        if args.overwrite:
            clear(out)
        write_marker(out, KIND)
        write_configuration(out, state["conf"])
        finished = dict(state["finished"])
        for m, why in state["left_out"].items():
            say(f"{m} left out: {why}")
        say(f"{len(finished)} of {len(state['names'])} tasks already finished; running "
            f"{0 if args.report_only else len(state['todo'])}")
        for i, name in enumerate([] if args.report_only else state["todo"], 1):
            finished[name] = _run_task(name, state, say)
            write_task(out, finished[name])
            write_aggregate(out, state, finished)
            say(f"{name} done ({i}/{len(state['todo'])}, {finished[name]['seconds']:.0f} s)")
        md = write_aggregate(out, state, finished)
        lock.release(failed=False)
    except (KeyboardInterrupt, ConfigError, DatasetError, ValueError, OSError) as e:
        kept = (f"the finished tasks are kept in {out / 'tasks'}: rerun the same command to resume" if lock
                else f"{args.output} is unchanged")
        return failed_run(e, lock, kept)
    print(f"leaderboard: {md} ({time.perf_counter() - t0:.0f} s)")
    return 0
