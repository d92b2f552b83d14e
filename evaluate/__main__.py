"""`python -m evaluate`: run L2E, SGHMC, cyclical SGHMC and deep ensembles on held-out tasks and write a report.

    python -m evaluate [--preset default|smoke] [--output DIR] [--sampler PATH] [--seed N]
                       [--set key=value ...] [--reference [TASK=]PATH ...] [--overwrite] [--quiet]

Bad input (unknown preset or key, bad value, missing/corrupt checkpoint or data, bad reference
probabilities, an output directory that holds another run or cannot be written) prints
`error: <one line>` to stderr and exits with status 2, before anything is computed or written.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

RUN_MARKERS = ("config.json", "log.jsonl", "checkpoints")
"""Files of a meta-training run directory: evaluate never writes its report into one."""


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
    p.add_argument("--reference", action="append", default=[], metavar="[TASK=]PATH",
                   help="reference predictive probabilities (text, one row per test example, one column per "
                        "class, e.g. HMC) for TASK (default: the only task); adds agreement and total variation "
                        "per method (repeatable)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing report in --output")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def check_output(out: Path, overwrite: bool, config_error) -> None:
    """Refuse an --output that holds a report (unless overwrite) or a meta-training run, is not a directory,
    or cannot be written; probe writability now rather than after the evaluation."""
    if out.exists() and not out.is_dir():
        raise config_error(f"--output {out} exists and is not a directory")
    if out.is_dir():
        if (out / "report.json").exists() and not overwrite:
            raise config_error(f"{out / 'report.json'} exists; pass --overwrite or choose another --output")
        markers = [m for m in RUN_MARKERS if (out / m).exists()]
        if markers and not (out / "report.json").exists():
            raise config_error(f"--output {out} holds a meta-training run ({', '.join(markers)}); "
                               "choose another --output")
        probe_dir = out
    else:
        probe_dir = out.parent
        while not probe_dir.exists() and probe_dir != probe_dir.parent:
            probe_dir = probe_dir.parent
        if not probe_dir.is_dir():
            raise config_error(f"--output {out}: {probe_dir} is not a directory")
    try:  # os.access is not enough (root, read-only mounts): really create a file
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=probe_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise config_error(f"--output {out} is not writable ({probe_dir}: {e.strerror})") from None


def _parse_references(items: list[str]) -> dict:
    refs = {}
    for item in items:
        name, sep, path = item.partition("=")
        key, value = (name, path) if sep and not Path(item).exists() else (None, item)
        if key in refs:
            raise ValueError(f"--reference given twice for {'the task' if key is None else key}")
        refs[key] = value
    return refs


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
        check_output(out, args.overwrite, ConfigError)
        references = _parse_references(args.reference)
        results = evaluate(cfg, out, sampler_path=args.sampler, progress=not args.quiet, references=references)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except user_errors as e:  # one line, exit 2; anything else is a bug and keeps its traceback
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"error: {msg}", file=sys.stderr)
        return 2
    except OSError as e:  # e.g. the report could not be written after all
        print(f"error: {e.strerror or type(e).__name__}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    print(format_table(results))
    print(f"report: {results['paths']['markdown']} (json: {results['paths']['json']}, "
          f"curves: {results['paths']['curves']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
