"""`python -m evaluate reference --suite zoo`: compute the zoo's NUTS references (tasks.zoo.ZOO), each with its own
NUTS settings and key, resumably, in parallel worker processes.

    python -m evaluate reference --suite zoo --output results/references [--task NAME ...] [--jobs N]
                                 [--overwrite] [--list]

An output directory that already holds some of the entries (written by us) is resumed: the entries in its index are
skipped, the others computed. --task NAME (repeatable) selects entries by task name; with --overwrite the selected
entries are recomputed (every entry when none is named). --jobs N computes N entries at once, one process each (the
parent process writes every file, so the index is never written by two processes). --list prints the zoo: name,
stratum, split, and whether the output directory holds it.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from base.io import ConfigError

SUITES = ("zoo",)
"""Reference suites: a list of tasks with their NUTS settings (zoo: tasks.zoo.ZOO)."""


def compute_entry(entry, seed: int = 0) -> tuple[dict, dict]:
    """(arrays, metadata) of one zoo entry's reference: its task built, NUTS run with its settings and its key
    fold_in(PRNGKey(seed), entry.key). Runs in a worker process (importable at top level)."""
    import jax

    from evaluate.hmc_reference import compute_reference
    from tasks import build

    t0 = time.perf_counter()
    task = build(entry.spec)
    arrays, meta = compute_reference(task, jax.random.fold_in(jax.random.PRNGKey(seed), entry.key), entry.chains,
                                     entry.warmup, entry.samples, entry.thinning, "init_params",
                                     max_num_doublings=entry.max_doublings, name=entry.name, seed=seed,
                                     keep_draws=entry.keep_draws, keep_rows=entry.keep_rows)
    meta["key"] = f"fold_in(PRNGKey({seed}), {entry.key}) (tasks.zoo entry key)"
    meta["zoo"] = {"entry": dataclasses.asdict(entry), "backend": jax.default_backend(),
                   "device": str(jax.devices()[0].device_kind), "wall_seconds": time.perf_counter() - t0}
    return arrays, meta


def select_entries(names: list[str]):
    """The ZOO entries named (every entry when none); ConfigError for an unknown name."""
    from tasks.zoo import ZOO, by_name

    if not names:
        return list(ZOO)
    known = by_name()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"unknown zoo task {unknown[0]!r}; see `python -m evaluate reference --suite zoo --list`")
    return [known[n] for n in names]


def check_output(out: Path, overwrite: bool) -> dict:
    """The index of an existing zoo output directory ({} for a new one); refuses what is not ours or not a
    reference directory (evaluate.hmc_reference.check_reference_output's rules, resuming allowed)."""
    from evaluate.hmc_reference import check_reference_output
    from tasks.reference import INDEX, read_index

    if (out / INDEX).exists():
        check_reference_output(out, True, ConfigError)  # ours, a readable index, writable
        return read_index(out)
    check_reference_output(out, overwrite, ConfigError)
    return {}


def list_zoo(out: Path) -> None:
    """Print one line per entry: name, stratum, split, in the output directory or not."""
    from tasks.reference import INDEX, read_index
    from tasks.zoo import DATA_SIZES, ZOO, split, stratum

    from tasks.zoo import zoo_verdict

    index = read_index(out) if (out / INDEX).is_file() else {}
    halves = split()
    for e in ZOO:
        meta = _metadata(out, index, e.name)
        verdict = None if meta is None else zoo_verdict(meta)
        state = "missing" if meta is None else ("converged" if verdict is None else f"not converged: {verdict}")
        print(f"{e.name}\t{stratum(e, DATA_SIZES[e.name])}\t{halves[e.name]}\t{state}")


def _metadata(out: Path, index: dict, name: str) -> dict | None:
    """A zoo entry's metadata: from its reference folder, else from not_converged/<slug>.json (evaluate.zoo_files),
    else None."""
    import json

    from tasks.reference.files import slugify
    from tasks.reference.read import read_metadata

    if name in index:
        return read_metadata(out / index[name]["dir"], f"{out}: {name}")
    kept = out / "not_converged" / f"{slugify(name)}.json"
    return json.loads(kept.read_text()) if kept.is_file() else None


def zoo_table(out: Path) -> str:
    """The markdown table of the zoo as `out` holds it: task, family, N, parameters, fn-space R̂ max, divergent,
    chains × draws, full-batch gradients, wall seconds, where computed, split, converged by the zoo rule."""
    from tasks.reference import INDEX, read_index
    from tasks.zoo import DATA_SIZES, ZOO, families, split, zoo_converged

    index = read_index(out) if (out / INDEX).is_file() else {}
    halves = split()
    rows = ["| task | family | N | parameters | fn-space R̂ max | divergent | chains × draws | gradients | wall s | "
            "computed on | split | converged (R̂ < 1.05, 0 divergent) |", "|" + "---|" * 12]
    for e in ZOO:
        fam = ", ".join(families(e, DATA_SIZES[e.name]))
        m = _metadata(out, index, e.name)
        if m is None:
            rows.append(f"| `{e.name}` | {fam} | {DATA_SIZES[e.name]:,} | | | | | | | | {halves[e.name]} | missing |")
            continue
        rhat = m["function_space"]["split_rhat"]["max"]
        smp = m["sampler"]
        where = "GPU" if e.gpu else "CPU"
        rows.append(f"| `{e.name}` | {fam} | {DATA_SIZES[e.name]:,} | {m['weight_space']['num_params']:,} | "
                    f"{'nan' if rhat is None else f'{rhat:.3f}'} | {m['num_divergent']} | {smp['chains']} × "
                    f"{smp['samples_per_chain']} | {m['num_grad_evals']:,} | {m['seconds']:.0f} | {where} | "
                    f"{halves[e.name]} | {'yes' if zoo_converged(m) else '**no**'} |")
    return "\n".join(rows)


def run_suite(args) -> int:
    """Compute the selected entries that the output lacks (all selected with --overwrite), --jobs at a time."""
    from cli import write_marker
    from evaluate.cli_common import OutputLock
    from evaluate.hmc_reference import summary_line
    from tasks.reference import write_reference

    out = Path(args.output)
    entries = select_entries(args.tasks)
    if args.list:
        list_zoo(out)
        return 0
    if args.table:
        print(zoo_table(out))
        return 0
    index = check_output(out, args.overwrite)
    todo = [e for e in entries if args.overwrite or e.name not in index]
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be ≥ 1, got {args.jobs}")
    lock = OutputLock(out, ConfigError)
    write_marker(out, "reference")
    held = sum(e.name in index for e in entries)
    print(f"zoo: {held} of {len(entries)} selected entries already in {out}; computing {len(todo)}"
          + (" (--overwrite)" if args.overwrite else "") + f" with {args.jobs} process(es)", flush=True)
    try:
        for entry, (arrays, meta), seconds in _results(todo, args.jobs):
            task_dir = write_reference(out, entry.name, arrays, meta)
            print(summary_line(meta) + f" ({seconds:.0f} s wall) -> {task_dir}", flush=True)
        lock.release(failed=False)
    except BaseException:
        lock.release(failed=True)
        raise
    return 0


def _results(entries, jobs: int):
    """Yield (entry, (arrays, metadata), wall seconds of its computation, data loading and compilation included) as
    each entry finishes; in this process for jobs = 1."""
    if jobs == 1 or len(entries) <= 1:
        for e in entries:
            arrays, meta = compute_entry(e)
            yield e, (arrays, meta), meta["zoo"]["wall_seconds"]
        return
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        started = {pool.submit(compute_entry, e): e for e in entries}
        pending = set(started)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    arrays, meta = f.result()
                    yield started[f], (arrays, meta), meta["zoo"]["wall_seconds"]
        except BaseException:
            for f in pending:
                f.cancel()
            raise


def suite_main(args) -> int:
    """Entry from `evaluate reference --suite`: one `error:` line for bad input."""
    from base.io import one_line

    try:
        return run_suite(args)
    except ConfigError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
