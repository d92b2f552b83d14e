"""B4: peak memory of meta-training at inner length 3000 ÷ at 500.

Usage: python -m bench.memory [--long 3000] [--short 500] [--num-outer 2]

Each length runs `python -m meta_train --preset smoke --num-outer N --set inner.num_steps=L` (samples stay
at the end of the chain: 3 samples 5 steps apart) in its own child process, wrapped by a tiny Python
parent that reports resource.getrusage(RUSAGE_CHILDREN).ru_maxrss (peak resident set size, KiB).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time

WRAPPER = ("import resource, subprocess, sys, json; r = subprocess.run(sys.argv[1:]); "
           "print(json.dumps({'rc': r.returncode, "
           "'maxrss_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))")


def peak_rss(num_steps: int, num_outer: int = 2, preset: str = "smoke") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "meta_train", "--preset", preset, "--output", f"{tmp}/run", "--overwrite",
               "--no-progress", "--num-outer", str(num_outer), "--set", f"inner.num_steps={num_steps}"]
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], capture_output=True, text=True, check=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        if res["rc"] != 0:
            raise RuntimeError(f"meta_train failed ({res['rc']}): {out.stderr[-2000:]}")
        res["seconds"] = time.perf_counter() - t0
        return res


def memory_ratio(long: int = 3000, short: int = 500, num_outer: int = 2) -> dict:
    a = peak_rss(short, num_outer)
    b = peak_rss(long, num_outer)
    return {"short": short, "long": long, "rss_short_mib": a["maxrss_kib"] / 1024,
            "rss_long_mib": b["maxrss_kib"] / 1024, "B4": b["maxrss_kib"] / a["maxrss_kib"],
            "seconds": a["seconds"] + b["seconds"]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--long", type=int, default=3000)
    ap.add_argument("--short", type=int, default=500)
    ap.add_argument("--num-outer", type=int, default=2)
    a = ap.parse_args(argv)
    res = memory_ratio(a.long, a.short, a.num_outer)
    print(f"peak RSS: inner {res['short']} steps {res['rss_short_mib']:.0f} MiB, inner {res['long']} steps "
          f"{res['rss_long_mib']:.0f} MiB → ratio {res['B4']:.3f}  ({res['seconds']:.0f} s)")
    return res


if __name__ == "__main__":
    main()
