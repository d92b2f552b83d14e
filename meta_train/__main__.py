"""python -m meta_train --preset default --output runs/meta_train [--set key=value ...] [--resume|--overwrite]

Bad input (unknown preset or config key, bad value, missing or malformed data, an output directory that
holds another run or cannot be written, a corrupt checkpoint on --resume) prints `error: <one line>` to
stderr and exits with status 2 without writing anything.
"""
from __future__ import annotations

import argparse
import sys
import time


def _initialize_distributed() -> int:
    """`jax.distributed.initialize()` before anything else touches JAX (importing the project's modules does)."""
    from meta_train.distributed import initialize_distributed  # imports only jax (l2e would start a backend)

    try:
        initialize_distributed()
    except (RuntimeError, ValueError) as e:
        print(f"error: --distributed: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}",
              file=sys.stderr)
        return 2
    return 0


def build_parser(presets) -> argparse.ArgumentParser:
    from cli import OneLineErrorParser

    from cli.limits import HELP
    from tasks.limits import HELP as TASK_LIMITS

    p = OneLineErrorParser(prog="python -m meta_train", description=__doc__.splitlines()[0],
                           epilog=f"{HELP}.\n{TASK_LIMITS}.")
    p.add_argument("--preset", default="default", help=f"one of: {', '.join(presets)}")
    p.add_argument("--output", default="runs/meta_train", help="run directory (config, log, checkpoints)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--num-outer", type=int, default=None, help="outer (ES) iterations")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. inner.num_steps=500, es.sigma=0.02, "
                        "tasks.datasets=digits,synthetic_images (repeatable)")
    p.add_argument("--resume", action="store_true", help="continue the run in --output from its latest checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace the run in --output")
    p.add_argument("--keep-checkpoints", type=int, default=3, metavar="N",
                   help="checkpoint steps kept, the newest (default 3; 0 keeps every step, e.g. for "
                        "`python -m evaluate select`)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--distributed", action="store_true",
                   help="multi-host run: call jax.distributed.initialize() first (coordinator from "
                        "$JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES, $JAX_PROCESS_ID or auto-detected); "
                        "run the same command on every host; only process 0 writes --output")
    return p


def config_from_args(args, presets):
    """The MetaTrainConfig the command line names: the preset with the --set overrides, --seed and --num-outer applied
    at once (cli.apply_overrides: a key given twice, e.g. --seed and --set seed=…, is refused)."""
    from base.io import ConfigError
    from cli import apply_overrides, check_seed

    if args.preset not in presets:
        raise ConfigError(f"unknown preset {args.preset!r} (known: {', '.join(presets)})")
    if args.resume and args.overwrite:
        raise ConfigError("--resume and --overwrite exclude each other")
    if args.seed is not None:
        check_seed(args.seed, "--seed")
    flags = (("seed", args.seed), ("num_outer", args.num_outer))  # with --set: one set of overrides, each key once
    return apply_overrides(presets[args.preset], list(args.overrides) + [f"{k}={v}" for k, v in flags if v is not None])


def main(argv: list[str] | None = None) -> int:
    """`python -m meta_train ...` under the CLI guard (cli.guard: whatever escapes is one `error:` line)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--distributed" in argv and (rc := _initialize_distributed()):
        return rc
    from cli import guarded

    return guarded(_main, argv)


def _main(argv: list[str]) -> int:
    from meta_train.presets import PRESETS

    args = build_parser(PRESETS).parse_args(argv)

    from l2e.checkpoint import CheckpointError
    from base.io import ConfigError, one_line
    from cli import Terminated, handle_sigterm
    from meta_train.run_dir import RunDirError
    from meta_train.train import meta_train
    from tasks.datasets import DatasetError

    try:
        handle_sigterm()
        config = config_from_args(args, PRESETS)
        t0 = time.perf_counter()
        summary = meta_train(config, args.output, resume=args.resume, overwrite=args.overwrite,
                             progress=not args.no_progress, keep_checkpoints=args.keep_checkpoints)
    except (ConfigError, RunDirError, CheckpointError, DatasetError, ValueError) as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except OSError as e:  # e.g. the disk filled up or the directory became unwritable mid-run
        what = f"{e.strerror}: {e.filename or args.output}" if e.strerror else one_line(e)
        print(f"error: {what}; continue with --resume --output {args.output}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        why = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        print(f"error: {why}; continue with --resume --output {args.output}", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    print(f"meta-training done: {summary['iterations']} outer iterations in {time.perf_counter() - t0:.1f} s, "
          f"last meta-loss {summary['final_meta_loss']}; checkpoints in {args.output}/checkpoints")
    return 0


if __name__ == "__main__":
    code = main()  # first: with --distributed, jax.distributed.initialize() must precede importing l2e
    from cli import exit_cli

    exit_cli(code)
