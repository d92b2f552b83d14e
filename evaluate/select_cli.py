"""The `python -m evaluate select` command line (evaluate.select holds the selection itself): the output check,
the parser and `select_main`."""
from __future__ import annotations

from pathlib import Path

from evaluate.select import (METRICS, RUN_MARKERS, SELECTION_FILES, _error, prepare_selection, run_checkpoints,
                             run_selection, selection_markdown, write_selection)

__all__ = ["build_select_parser", "check_selection_output", "select_main"]


def check_selection_output(out: Path, overwrite: bool, run_dir) -> None:
    """Refuse an --output that holds a selection (unless overwrite), a meta-training run (the run directory
    itself included), anything else that is not a selection of ours, is not a directory, is a dangling link or
    cannot be written."""
    import os

    from evaluate.report import probe_writable
    from base.io import ConfigError

    if out.is_symlink() and not out.exists():
        raise _error(f"--output {out} is a dangling symbolic link (to {os.readlink(out)})")
    if out.exists() and not out.is_dir():
        raise _error(f"--output {out} exists and is not a directory")
    if out.exists() and Path(run_dir).exists() and out.resolve() == Path(run_dir).resolve():
        raise _error(f"--output {out} is the run directory; choose another --output")
    if out.is_dir():
        has = (out / SELECTION_FILES[0]).exists()
        if has and not overwrite:
            raise _error(f"{out / SELECTION_FILES[0]} exists; pass --overwrite or choose another --output")
        markers = [m for m in RUN_MARKERS if (out / m).exists()]
        if markers:
            raise _error(f"--output {out} holds a meta-training run ({', '.join(markers)}); choose another --output")
        from cli import read_marker, require_ours
        from cli.outputs import KINDS, check_ours

        kind = read_marker(out)
        if kind in KINDS and kind != "selection":
            raise _error(f"--output {out} holds {KINDS[kind]}; choose another --output")
        if has:  # --overwrite: only a selection of ours (cli.outputs marker)
            require_ours(out, "selection", _error, "replace its selection")
        if not has:  # any entry, hidden or not, without the marker: not ours (cli.outputs.check_ours)
            check_ours(out, "selection", _error, "write a selection into it",
                       unmarked=f"is a non-empty directory without {SELECTION_FILES[0]} (not a selection of ours)")
    probe_writable(out, ConfigError)


def build_select_parser():
    import argparse

    from evaluate.cli_common import TASK_EPILOG
    from cli import OneLineErrorParser

    p = OneLineErrorParser(prog="python -m evaluate select",
                           description="Checkpoint selection: evaluate every committed step of a meta-training run "
                                       "on the selection tasks and pick the best by --metric.",
                           epilog=TASK_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR", help="meta-training run directory (or its checkpoints/ directory)")
    p.add_argument("--output", required=True, help="selection directory (gets selection.json, selection.md)")
    p.add_argument("--preset", default="default",
                   help="evaluation preset: its tasks, budget, tuning and lr grid (default: default)")
    p.add_argument("--task", dest="tasks", action="append", default=[], metavar="SPEC",
                   help="a selection task string (grammar below; repeatable; replaces the preset's tasks)")
    p.add_argument("--model", default=None, metavar="PKG.MODULE:FACTORY",
                   help="your flax model for every --task that names no model")
    p.add_argument("--metric", default="nll",
                   help="nll (the L2E authors' rule: held-out BMA NLL; regression −LPPD) or tv (total variation to "
                        "a NUTS reference; needs --reference) (default: nll)")
    p.add_argument("--reference", action="append", default=[], metavar="[TASK=]PATH",
                   help="reference posterior of a selection task, as `python -m evaluate --reference` (a directory "
                        "from `python -m evaluate reference` or a probabilities file); adds TV and dispersion ratios")
    p.add_argument("--method", default=None,
                   help="the learned evaluation method (default: by the checkpoints' sampler kind: l2e → l2e, "
                        "mass → l2e_mass, kinetic → l2e_kinetic, meta_sgmcmc → meta_sgmcmc)")
    p.add_argument("--seed", type=int, default=None, help="evaluation seed (overrides the preset's)")
    p.add_argument("--seeds", default=None, metavar="S1,S2,...",
                   help="evaluation seeds: every step is evaluated with each; the metric is the mean over them")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override an evaluation config field, e.g. --set num_steps=500 "
                        "--set settings.meta_sgmcmc.lrs=0.01,0.03")
    p.add_argument("--overwrite", action="store_true", help="replace an existing selection in --output")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def select_main(argv) -> int:
    """`python -m evaluate select ...`: validate everything (metric, references, run, checkpoints, config, tasks,
    output), then evaluate step by step and write the selection; one-line errors, exit 2, nothing written."""
    import l2e
    from evaluate.cli_common import OutputLock, parse_references, failed_run, with_task_strings
    from evaluate.config import get_preset
    from base.io import ConfigError
    from cli import apply_overrides, handle_sigterm, write_marker
    from tasks.datasets import DatasetError

    args = build_select_parser().parse_args(argv)
    out, lock = Path(args.output), None
    try:
        handle_sigterm()
        if args.metric not in METRICS:
            raise ConfigError(f"unknown --metric {args.metric!r} (known: {', '.join(METRICS)})")
        references = parse_references(args.reference)
        if args.metric == "tv" and not references:
            raise ConfigError("--metric tv needs --reference (a NUTS reference of every selection task, e.g. "
                              "--reference results/references)")
        run_checkpoints(args.run_dir)  # a missing run / no checkpoint: reported before the output is looked at
        flags = (("seed", args.seed), ("seeds", args.seeds))
        cfg = apply_overrides(get_preset(args.preset),
                              list(args.overrides) + [f"{k}={v}" for k, v in flags if v is not None])
        cfg = with_task_strings(cfg, args.tasks, args.model)
        check_selection_output(out, args.overwrite, args.run_dir)
        prep = prepare_selection(cfg, args.run_dir, args.metric, references, args.method)
        lock = OutputLock(out, ConfigError)  # created (and locked) only once every input is checked
        progress = None if args.quiet else (lambda line: print(f"select: {line}", flush=True))
        sel = run_selection(prep, progress)
        write_marker(out, "selection")
        paths = write_selection(sel, out)
        lock.release(failed=False)
    except (KeyboardInterrupt, ConfigError, l2e.CheckpointError, DatasetError, ValueError, OSError) as e:
        return failed_run(e, lock, f"{args.output} is unchanged")
    print(selection_markdown(sel))
    print(f"selection: {paths['markdown']} (json: {paths['json']})")
    return 0
