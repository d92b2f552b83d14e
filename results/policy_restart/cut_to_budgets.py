"""Copy a leaderboard run cut back to its own largest budget, as if it had run with --extend 0 (every extension's
points dropped and the gradients to floor recomputed, with evaluate.leaderboard.merge.cut_row, the merge's own cut).

    python results/policy_restart/cut_to_budgets.py SOURCE_DIR OUT_DIR
"""
import json
import shutil
import sys
from pathlib import Path

from evaluate.leaderboard.merge import cut_row

source, out = Path(sys.argv[1]), Path(sys.argv[2])
if out.exists():
    sys.exit(f"error: {out} exists")
shutil.copytree(source, out)
conf = json.loads((out / "configuration.json").read_text())
conf["extend"] = 0
(out / "configuration.json").write_text(json.dumps(conf, indent=1))
for path in (out / "tasks").glob("*.json"):
    record = json.loads(path.read_text())
    if record.get("extended"):
        floors = record["result"]["floors"]
        record["result"]["methods"] = {m: cut_row(row, max(conf["budgets"]), floors)
                                       for m, row in record["result"]["methods"].items()}
        record["extension_dropped"], record["extended"] = record["extended"]["budget"], None
    record["configuration"] = conf
    path.write_text(json.dumps(record, indent=1))
