"""Keep the zoo's reference directory small (issue 38: at most 40 MB in the repository):

- a reference that fails the zoo's convergence rule (tasks.zoo.zoo_verdict) leaves the index; its metadata.json is
  kept as `not_converged/<slug>.json` (R̂, divergences, cost: the README's list) and its draws are deleted — no
  statistic reads a non-converged reference, and `python -m evaluate reference --suite zoo --task NAME` rebuilds it;
- a regression reference written as float32 (before the zoo) is rewritten as float16 (tasks.reference.files: the
  floors move by at most 0.12 %).

    python -m evaluate.zoo_files results/references [--keep NAME ...]

--keep NAME leaves a non-converged reference in place (the issue-12 MNIST MLP-8 reference that tests and the README
read). Prints what it did and the directory's size.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np


def directory_bytes(root: Path) -> int:
    """Bytes of every file under root."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def prune(root: Path, keep: tuple[str, ...] = ()) -> list[str]:
    """Apply the module's two rules to reference directory `root`; returns one line per change."""
    from base.io import atomic_write_bytes, atomic_write_text
    from tasks.reference import INDEX, read_index
    from tasks.reference.files import PREDICTIVE, _f16_scale, _npz_bytes, slugify
    from tasks.zoo import by_name, zoo_verdict

    index, zoo, done = read_index(root), by_name(), []
    for name, entry in list(index.items()):
        task_dir = root / entry["dir"]
        meta = json.loads((task_dir / "metadata.json").read_text())
        why = zoo_verdict(meta)
        if name in zoo and why is not None and name not in keep:
            out = root / "not_converged" / f"{slugify(name)}.json"
            out.parent.mkdir(exist_ok=True)
            atomic_write_text(out, json.dumps(meta, indent=1) + "\n")
            del index[name]
            atomic_write_text(root / INDEX, json.dumps(index, indent=2) + "\n")
            shutil.rmtree(task_dir)
            done.append(f"{name}: {why}; metadata kept as {out.relative_to(root)}, draws deleted")
            continue
        path = task_dir / PREDICTIVE
        if path.is_file():
            with np.load(path) as z:
                loc, scale = z["loc"], z["scale"]
            if loc.dtype != np.float16:
                atomic_write_bytes(path, _npz_bytes(lambda f: np.savez(f, loc=loc.astype(np.float16),
                                                                       scale=_f16_scale(scale))))
                done.append(f"{name}: {PREDICTIVE} float32 -> float16")
    return done


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m evaluate.zoo_files", description=__doc__.splitlines()[0])
    p.add_argument("root")
    p.add_argument("--keep", action="append", default=[])
    args = p.parse_args(argv)
    root = Path(args.root)
    if not (root / "reference.json").is_file():
        print(f"error: {root} holds no reference.json", file=sys.stderr)
        return 2
    for line in prune(root, tuple(args.keep)):
        print(line)
    print(f"{root}: {directory_bytes(root) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
