"""Per budget, the geometric mean and the median over (task, seed) pairs of a leaderboard row's distance to the floor,
max(TV / TV floor, E² / E² floor) (1 = at the K-draw floor), up to G = 8,000; a divergent run counts as infinite.

    python results/policy_restart/distance_to_floor.py BOARD_DIR [BOARD_DIR ...] [--method policy] [--task TEXT]
"""
import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("boards", nargs="+")
parser.add_argument("--method", default="policy")
parser.add_argument("--task", default="", help="only the tasks whose name contains this text")
args = parser.parse_args()
for board in args.boards:
    by = defaultdict(list)
    for path in sorted(Path(board, "tasks").glob("*.json")):
        record = json.loads(path.read_text())
        if args.task not in record["task"]:
            continue
        floors = record["result"]["floors"]
        for points in record["result"]["methods"][args.method]["choices"]["oracle"]["seeds"].values():
            for p in points:
                if p["budget"] <= 8000:
                    ok = p.get("tv") is not None and p.get("energy") is not None
                    by[p["budget"]].append(max(p["tv"] / floors["tv"]["median"],
                                               p["energy"] / floors["energy"]["median"]) if ok else math.inf)
    cells = []
    for g, v in sorted(by.items()):
        gm = math.exp(sum(map(math.log, v)) / len(v)) if all(map(math.isfinite, v)) else math.inf
        cells.append(f"G={g}: {gm:.2f} (median {sorted(v)[len(v) // 2]:.2f}, n={len(v)})")
    print(board, "|", "; ".join(cells))
