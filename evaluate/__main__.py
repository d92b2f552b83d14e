"""`python -m evaluate`: run L2E, SGHMC, cyclical SGHMC and deep ensembles on held-out tasks and write a report.

    python -m evaluate [--preset default|smoke] [--output DIR] [--sampler PATH] [--seed N]
                       [--set key=value ...] [--overwrite] [--quiet]

Bad input (unknown preset or key, bad value, missing/corrupt checkpoint or data) prints
`error: <one line>` to stderr and exits with status 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2 (argparse's own usage dump is multi-line)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m evaluate", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="default", help="configuration preset: default or smoke (default: default)")
    p.add_argument("--output", default="runs/evaluate", help="report directory (default: runs/evaluate)")
    p.add_argument("--sampler", default=None,
                   help="L2E checkpoint: a meta-training run dir, its checkpoints/ dir or a step dir "
                        "(default: the shipped checkpoint)")
    p.add_argument("--seed", type=int, default=None, help="evaluation seed (overrides the preset's)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set num_steps=500 --set grid.sghmc_lrs=0.01,0.1 "
                        "--set methods=l2e,sghmc --set tune=false")
    p.add_argument("--overwrite", action="store_true", help="replace an existing report in --output")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import l2e
    from evaluate.config import ConfigError, apply_overrides, get_preset
    from evaluate.run import evaluate, format_table
    from tasks.datasets import DatasetError

    user_errors = (ConfigError, l2e.CheckpointError, DatasetError, ValueError)
    try:
        cfg = get_preset(args.preset)
        overrides = list(args.overrides) + ([f"seed={args.seed}"] if args.seed is not None else [])
        cfg = apply_overrides(cfg, overrides)
        out = Path(args.output)
        if (out / "report.json").exists() and not args.overwrite:
            raise ConfigError(f"{out / 'report.json'} exists; pass --overwrite or choose another --output")
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--output {out} exists and is not a directory")
        results = evaluate(cfg, out, sampler_path=args.sampler, progress=not args.quiet)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except user_errors as e:  # one line, exit 2; anything else is a bug and keeps its traceback
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        return 2
    print(format_table(results))
    print(f"report: {results['paths']['markdown']} (json: {results['paths']['json']}, "
          f"curves: {results['paths']['curves']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
