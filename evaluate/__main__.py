"""`python -m evaluate`: tune, run and score the registered methods (L2E and baselines) on held-out tasks; report.

    python -m evaluate [--preset default|smoke|full|regression_1d|paper] [--task SPEC ...] [--model pkg.mod:Factory]
                       [--output DIR] [--sampler PATH] [--seed N]
                       [--seeds 0,1,2] [--budget gradients|seconds] [--budget-seconds S] [--released PATH]
                       [--set key=value ...] [--reference [TASK=]PATH ...] [--save-samples] [--overwrite] [--quiet]
    python -m evaluate reference --output DIR [--preset P] [--task NAME|SPEC ...] [--model pkg.mod:Factory]
                       [--set key=value ...]
                       [--chains 4] [--warmup 200] [--samples 100] [--thinning 1] [--max-doublings 10]
                       [--seed N] [--init init_params|prior] [--overwrite] [--quiet]
    python -m evaluate reference --suite zoo --output DIR [--task NAME ...] [--jobs N] [--overwrite] [--list]

    python -m evaluate leaderboard --reference DIR --output DIR [--methods M1,M2,...] [--method PKG.MODULE:NAME]
                       [--task NAME ...] [--budgets G1,...] [--extend G] [--chains 1,10] [--seeds 0,1,2] [--overwrite]
    python -m evaluate card [--output DIR] [--sampler PATH] [--released PATH] [--set key=value ...] [--overwrite]
    python -m evaluate select RUN_DIR --output DIR [--preset P] [--task SPEC ...] [--metric nll|tv]
                       [--reference [TASK=]PATH ...] [--method NAME] [--seed N] [--seeds 0,1,2] [--set key=value ...]
                       [--overwrite] [--quiet]

The `card` subcommand runs the sampler card (evaluate.card: known Gaussian / mixture targets with gradient noise).
The `select` subcommand evaluates every committed checkpoint step of a meta-training run on selection tasks and
picks the best by held-out BMA NLL (the L2E authors' rule) or TV to a NUTS reference (evaluate.select).
The `reference` subcommand computes the project's own full-batch NUTS reference of each task (test-set
predictive + convergence diagnostics; evaluate.hmc_reference), to be passed back as `--reference DIR`.

Bad input (unknown preset or key, bad value, missing/corrupt checkpoint or data, bad reference
probabilities, an output directory that holds another run or cannot be written) prints
`error: <one line>` to stderr and exits with status 2, before anything is computed or written.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from evaluate.cli_common import (TASK_EPILOG, OutputLock, failed_run, interrupted, parse_references,
                                 register_method_flags, with_task_strings, with_user_methods)
from evaluate.report import probe_writable
from base.io import ConfigError, one_line
from cli import OneLineErrorParser, Terminated, apply_overrides, handle_sigterm, held_warnings, write_marker
from tasks.spec_parse import TaskStringError

RUN_MARKERS = ("config.json", "log.jsonl", "checkpoints")
"""Files of a meta-training run directory: evaluate never writes its report into one."""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(prog="python -m evaluate", description=__doc__.splitlines()[0],
                           epilog=TASK_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="default", help="configuration preset: default, smoke, full (every method; UCI yacht + digits), regression_1d or paper (CIFAR-10 ResNet20-FRN + FMNIST; needs the TFDS data) (default: default)")
    p.add_argument("--task", dest="tasks", action="append", default=[], metavar="SPEC",
                   help="a task string (grammar below), e.g. uci:naval-propulsion-plant/mlp-50 or "
                        "npz:data/mine.npz/mlp-64 (repeatable; replaces the preset's tasks, keeps its methods and "
                        "budgets)")
    p.add_argument("--model", default=None, metavar="PKG.MODULE:FACTORY",
                   help="your flax model for every --task that names no model: FACTORY(input_shape, num_outputs) "
                        "returns a flax.linen Module (module on PYTHONPATH)")
    p.add_argument("--method", dest="user_methods", action="append", default=[], metavar="PKG.MODULE:NAME",
                   help="your own sampler: a factory (posterior, **hyperparameters) -> SamplingAlgorithm with an optional "
                        "grid attribute, or an evaluate.methods.Method, named NAME in PKG.MODULE on the Python path; "
                        "run beside the preset's methods (repeatable)")
    p.add_argument("--output", default="runs/evaluate", help="report directory (default: runs/evaluate)")
    p.add_argument("--sampler", default=None,
                   help="L2E checkpoint: a meta-training run dir, its checkpoints/ dir or a step dir "
                        "(default: the shipped checkpoint)")
    p.add_argument("--seed", type=int, default=None, help="evaluation seed (overrides the preset's)")
    p.add_argument("--seeds", default=None, metavar="S1,S2,...",
                   help="evaluation seeds: every method (tuning included) is repeated per seed and the report gives "
                        "mean ± standard error (config seeds=...)")
    p.add_argument("--budget", default=None, choices=("gradients", "seconds"),
                   help="gradients: every minibatch method gets num_steps updates (default); seconds: the same wall "
                        "time (--budget-seconds), steps set from each method's measured seconds per update")
    p.add_argument("--budget-seconds", type=float, default=None, metavar="S",
                   help="wall seconds per run of every minibatch method under --budget seconds")
    p.add_argument("--released", default=None, metavar="PATH",
                   help="the L2E authors' meta_params.pickle (or its directory) for method l2e_released (default: "
                        "$L2E_DATA_DIR/l2e_released, else ~/.cache/l2e/l2e_released)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set num_steps=500 --set settings.sghmc.lrs=0.01,0.1 "
                        "--set methods=l2e,sghmc --set tune=false (method settings: settings.<method>.<field>)")
    p.add_argument("--reference", action="append", default=[], metavar="[TASK=]PATH",
                   help="reference predictive probabilities (text, one row per test example, one column per "
                        "class, e.g. HMC) for TASK (default: the only task); adds agreement and total variation "
                        "per method (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing report in --output")
    p.add_argument("--save-samples", action="store_true",
                   help="also write each method's final-run parameter samples as ArviZ InferenceData (netCDF) to "
                        "OUTPUT/samples/<task>/<method>.nc")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def check_output(out: Path, overwrite: bool, config_error) -> None:
    """Refuse an --output that holds a report (unless overwrite), a report we did not write (no report marker,
    cli.outputs: a report.json alone proves nothing) on --overwrite, a meta-training run or any other output of
    ours, anything else that is not a report, is not a directory, is a dangling symbolic link, or cannot be written
    (nor its parent, where the report set is staged); probe writability now rather than after the evaluation."""
    from cli import read_marker, require_ours
    from cli.outputs import KINDS, check_ours

    if out.is_symlink() and not out.exists():
        raise config_error(f"--output {out} is a dangling symbolic link (to {os.readlink(out)})")
    if out.exists() and not out.is_dir():
        raise config_error(f"--output {out} exists and is not a directory")
    if out.is_dir():
        kind, has_report = read_marker(out), (out / "report.json").exists()
        if kind in KINDS and kind != "report":
            raise config_error(f"--output {out} holds {KINDS[kind]}; choose another --output")
        if has_report and not overwrite:
            raise config_error(f"{out / 'report.json'} exists; pass --overwrite or choose another --output")
        markers = [m for m in RUN_MARKERS if (out / m).exists()]
        if markers and not has_report:
            raise config_error(f"--output {out} holds a meta-training run ({', '.join(markers)}); "
                               "choose another --output")
        if has_report:
            require_ours(out, "report", config_error, "replace its report")
        else:  # any entry, hidden or not, without the marker: not ours (cli.outputs.check_ours)
            check_ours(out, "report", config_error, "write a report into it",
                       unmarked="is a non-empty directory without report.json (not a report of ours)")
    probe_writable(out, config_error)
    if out.exists():
        probe_writable(out.resolve().parent, config_error)


def build_reference_parser() -> argparse.ArgumentParser:
    p = OneLineErrorParser(prog="python -m evaluate reference",
                description="Full-batch NUTS reference (test-set predictive + diagnostics) of evaluation tasks.",
                epilog=TASK_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", required=True, help="reference directory (gets reference.json and one folder per task)")
    p.add_argument("--preset", default="default", help="configuration preset whose tasks are used (default: default)")
    p.add_argument("--task", dest="tasks", action="append", default=[], metavar="NAME|SPEC",
                   help="a task of the preset by report name, or task strings (grammar below) replacing the "
                        "preset's tasks (repeatable; default: every task of the preset)")
    p.add_argument("--model", default=None, metavar="PKG.MODULE:FACTORY",
                   help="your flax model for every --task string that names no model")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field as for the evaluation, e.g. --set seed=1")
    p.add_argument("--chains", type=int, default=4, help="NUTS chains per task (default: 4)")
    p.add_argument("--warmup", type=int, default=200, help="window-adaptation transitions per chain (default: 200)")
    p.add_argument("--samples", type=int, default=100, help="draws kept per chain (default: 100)")
    p.add_argument("--thinning", type=int, default=1, help="NUTS transitions between kept draws (default: 1)")
    p.add_argument("--max-doublings", type=int, default=10,
                   help="NUTS tree depth cap: at most 2^N leapfrog steps per transition (default: 10)")
    p.add_argument("--seed", type=int, default=None, help="seed (default: the preset's seed)")
    p.add_argument("--init", default="init_params", choices=("init_params", "prior", "ensemble"),
                   help="chain starts: the network initialiser (default), draws from the prior, or deep-ensemble "
                        "members (full-batch Adam from the initialiser's draws)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the given tasks' references in an existing reference directory")
    p.add_argument("--keep-draws", type=int, default=None, metavar="N",
                   help="classification: at most N draws keep their per-draw test probabilities (draw_probs.npz, "
                        "for the budget curves; default: 400, at most 4096: what the curves read)")
    p.add_argument("--keep-rows", type=int, default=None, metavar="N",
                   help="classification: the per-draw test probabilities on at most N evenly spaced test points "
                        "(their indices stored; default: every point): a large test set's file stays small")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--suite", default=None, choices=("zoo",),
                   help="compute a suite's references, each with its own NUTS settings and key (zoo: tasks.zoo.ZOO), "
                        "resuming an output directory that holds some of them (evaluate.zoo_build)")
    p.add_argument("--jobs", type=int, default=1, help="--suite: entries computed at once, one process each")
    p.add_argument("--list", action="store_true", help="--suite: list the entries, their split and state, and exit")
    p.add_argument("--table", action="store_true", help="--suite: print the zoo's markdown table (task, family, N, "
                   "parameters, R-hat, divergences, cost, device, split, converged) and exit")
    return p


SUITE_FIXED = ("--preset", "--model", "--set", "--chains", "--warmup", "--samples", "--thinning", "--max-doublings",
               "--seed", "--init", "--keep-draws", "--keep-rows")
"""Flags a --suite run refuses: the suite fixes each entry's task and NUTS settings."""


def _reference_inputs(args):
    """(cfg, task names, selected task indices, output dir, built tasks); raises ConfigError / DatasetError /
    ValueError on bad input, before anything is computed."""
    from evaluate.config import get_preset
    from evaluate.hmc_reference import check_reference_output
    from tasks import TaskCache, build

    for flag, value, low in (("--chains", args.chains, 1), ("--warmup", args.warmup, 0),
                             ("--samples", args.samples, 4), ("--thinning", args.thinning, 1),
                             ("--max-doublings", args.max_doublings, 1),
                             ("--keep-draws", 1 if args.keep_draws is None else args.keep_draws, 1),
                             ("--keep-rows", 1 if args.keep_rows is None else args.keep_rows, 1)):
        if value < low:
            raise ConfigError(f"{flag} must be ≥ {low}, got {value}")
    from cli import limits
    from tasks.reference import MAX_READ_DRAWS

    for flag, value, limit in (("--chains", args.chains, limits.MAX_CHAINS),
                               ("--warmup", args.warmup, limits.MAX_STEPS),
                               ("--samples", args.samples, limits.MAX_SAMPLES),
                               ("--thinning", args.thinning, limits.MAX_STEPS),
                               ("--max-doublings", args.max_doublings, 20),
                               ("--samples × --thinning", args.samples * args.thinning, limits.MAX_STEPS),
                               ("--keep-draws", args.keep_draws, MAX_READ_DRAWS)):  # what the curves read
        limits.at_most(flag, value, limit)
    cfg = get_preset(args.preset)
    cfg = apply_overrides(cfg, list(args.overrides) + ([f"seed={args.seed}"] if args.seed is not None else []))
    names = cfg.task_names()
    unknown = [name for name in args.tasks if name not in names]
    args.task_strings = args.model is not None or bool(unknown)
    if args.task_strings:  # task strings replace the preset's tasks
        try:
            cfg = with_task_strings(cfg, args.tasks, args.model)
        except TaskStringError as e:  # a task string that does not parse or resolve (data errors pass as they are)
            if not unknown or args.model is not None:
                raise
            raise ConfigError(f"unknown task {unknown[0]!r}: not a task of this configuration ({', '.join(names)}) "
                              f"nor a usable task string ({one_line(e)})") from None
        names, args.tasks = cfg.task_names(), []
    selected = [i for i, n in enumerate(names) if not args.tasks or n in args.tasks]
    out = Path(args.output)
    check_reference_output(out, args.overwrite, ConfigError)
    cache = TaskCache()
    built = {i: build(cfg.tasks[i], cache) for i in selected}  # dataset errors surface here
    return cfg, names, selected, out, built


def _write_references(args, cfg, names, selected, out: Path, built: dict) -> None:
    """Compute and write the reference of each selected task, printing a summary line per task."""
    import jax
    from tqdm import tqdm

    from evaluate.hmc_reference import MAX_DRAWS, compute_reference, summary_line
    from tasks.reference import write_reference

    root = jax.random.PRNGKey(cfg.seed)
    for i in selected:
        name = names[i]
        with tqdm(total=args.chains * args.samples, desc=f"NUTS {name}", unit="draw", disable=args.quiet,
                  dynamic_ncols=True) as bar:
            def progress(chain, draw, bar=bar):
                bar.set_postfix_str(f"chain {chain + 1}/{args.chains}", refresh=False)
                bar.update(1)

            arrays, meta = compute_reference(built[i], jax.random.fold_in(root, i), args.chains, args.warmup,
                                             args.samples, args.thinning, args.init,
                                             max_num_doublings=args.max_doublings, name=name, seed=cfg.seed,
                                             progress=progress, keep_draws=args.keep_draws or MAX_DRAWS,
                                             keep_rows=args.keep_rows)
            meta["key"] = f"fold_in(PRNGKey({cfg.seed}), {i}) (task index {i} of " + (
                "the --task strings)" if args.task_strings else f"preset {args.preset!r})")
        task_dir = write_reference(out, name, arrays, meta)
        print(summary_line(meta) + f" -> {task_dir}", flush=True)
        if not meta["converged"]:
            print(f"WARNING: {name}: the NUTS reference did not converge by the rule "
                  f"'{meta['convergence_rule']}'; see {task_dir / 'metadata.json'}", file=sys.stderr, flush=True)


def reference_main(argv) -> int:
    """`python -m evaluate reference ...`: validate everything, then compute and write task by task."""
    args = build_reference_parser().parse_args(argv)
    from tasks.datasets import DatasetError

    if args.suite is not None:
        fixed = [f for f in SUITE_FIXED if any(a == f or a.startswith(f + "=") for a in argv)]
        if fixed:
            print(f"error: {fixed[0]} does not apply with --suite (the suite fixes each entry's task and NUTS "
                  "settings)", file=sys.stderr)
            return 2
        from evaluate.zoo_build import suite_main

        return suite_main(args)
    if args.jobs != 1 or args.list or args.table:
        print("error: --jobs, --list and --table apply with --suite only", file=sys.stderr)
        return 2

    lock = None
    try:
        handle_sigterm()
        with held_warnings():
            inputs = _reference_inputs(args)
        lock = OutputLock(inputs[3], ConfigError)
        write_marker(inputs[3], "reference")
    except KeyboardInterrupt as e:
        print(f"error: {interrupted(e)}", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except (ConfigError, DatasetError, ValueError, OSError) as e:
        if lock is not None:
            lock.release(failed=True)
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    try:
        _write_references(args, *inputs)
        lock.release(failed=False)
    except (KeyboardInterrupt, OSError, ValueError) as e:
        return failed_run(e, lock, f"the tasks finished so far are in {inputs[3]}")
    print(f"reference: {inputs[3] / 'reference.json'}")
    return 0


def _cli_overrides(args) -> list[str]:
    """--set overrides, then --seed, --seeds, --budget-seconds and --budget as config overrides (--budget-seconds
    alone implies --budget seconds)."""
    mode = args.budget or ("seconds" if args.budget_seconds is not None else None)
    flags = (("seed", args.seed), ("seeds", args.seeds), ("budget_seconds", args.budget_seconds), ("budget", mode))
    return list(args.overrides) + [f"{key}={value}" for key, value in flags if value is not None]


def main(argv=None) -> int:
    """`python -m evaluate [SUBCOMMAND] ...` under the CLI guard (cli.guard: whatever escapes is one `error:` line)."""
    from cli import guarded

    return guarded(_main, sys.argv[1:] if argv is None else list(argv))


def _main(argv: list[str]) -> int:
    try:
        register_method_flags(argv)
        from evaluate.methods.registry import check_extra_methods

        check_extra_methods()  # a method from --method / $L2E_METHODS that could not be registered: one error line
    except ConfigError as e:
        print(f"error: {one_line(e)}", file=sys.stderr, flush=True)
        return 2
    if argv and argv[0] == "reference":
        return reference_main(argv[1:])
    if argv and argv[0] == "card":
        from evaluate.card.cli import card_main

        return card_main(argv[1:])
    if argv and argv[0] == "leaderboard":
        from evaluate.leaderboard.cli import leaderboard_main

        return leaderboard_main(argv[1:])
    if argv and argv[0] == "curve":
        from evaluate.curve.cli import curve_main

        return curve_main(argv[1:])
    if argv and argv[0] == "select":
        from evaluate.select_cli import select_main

        return select_main(argv[1:])
    args = build_parser().parse_args(argv)
    import l2e
    from evaluate.config import get_preset
    from evaluate.report import format_table
    from evaluate.run import evaluate
    from tasks.datasets import DatasetError

    user_errors = (ConfigError, l2e.CheckpointError, DatasetError, ValueError)
    lock = None
    try:
        handle_sigterm()
        with held_warnings():
            cfg = apply_overrides(get_preset(args.preset), _cli_overrides(args))
            cfg = with_user_methods(cfg, args.user_methods)
            cfg = with_task_strings(cfg, args.tasks, args.model)
            out = Path(args.output)
            check_output(out, args.overwrite, ConfigError)
            references = parse_references(args.reference)
        lock = OutputLock(out, ConfigError)
        results = evaluate(cfg, out, sampler_path=args.sampler, progress=not args.quiet, references=references,
                           samples=args.save_samples, released_path=args.released)
        lock.release(failed=False)
    except (KeyboardInterrupt, *user_errors, OSError) as e:  # anything else is a bug and keeps its traceback
        return failed_run(e, lock, f"{args.output} is unchanged")
    print(format_table(results))
    print(f"report: {results['paths']['markdown']} (json: {results['paths']['json']}, "
          f"curves: {results['paths']['curves']})")
    return 0


if __name__ == "__main__":
    code = main()  # first: with --distributed, jax.distributed.initialize() must precede importing l2e
    from cli import exit_cli

    exit_cli(code)
