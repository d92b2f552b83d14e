"""The schema of a budget-curve result (curve.json of `python -m evaluate curve`), checked when a finished run is read
back — `evaluate curve --merge` and `python -m bench.select_window` — before anything is computed or written: every
field those readers use, at every level, of its JSON kind (numbers finite, counts integers ≥ 0), every seed's points
one per budget in the run's order. One ConfigError line names the file and the field's path.

    {"k", "curve": {"budgets", "chains", "seeds", "tune_budget", "tune_seed"}, "methods": [str], "tasks": {name:
     {"floors": {"tv", "energy": {"median", "q10", "q90"}, "predictive_variance"?: {…, "q05", "q95"}, "k",
      "resamples", "draws"}, "methods": {row: {"method", "chains", "tuning": {"gradients", "grid", …},
      "choices": {"validation"?, "oracle": {"hp", "seeds": {seed: [point per budget]},
      "to_floor": {"tv", "energy": {"per_seed", "reached", "seeds", "mean", "se"}}}}}}}},
     "off_curve"?: {method: why}, "seconds"?, "merged"?, "merged_from"?, "reread_with"?}
"""
from __future__ import annotations

from base.io import ConfigError, check_json_object, json_type

__all__ = ["check_curve_result"]

TOP = {"k": "count", "curve": "object", "methods": "list", "tasks": "object", "seconds": "number",
       "off_curve": "object", "merged": "list", "merged_from": "count", "reread_with": "str"}
CURVE = {"budgets": "list", "chains": "list", "seeds": "list", "tune_budget": "count", "tune_seed": "int"}
TASK = {"floors": "object", "methods": "object", "seconds": "number", "replaced": "list"}
FLOORS = {"tv": "object", "energy": "object", "predictive_variance": "object", "k": "count", "resamples": "count",
          "draws": "count"}
QUANTILES = {"median": "number", "q10": "number", "q90": "number"}
SPREAD = {**QUANTILES, "q05": "number", "q95": "number"}
ROW = {"method": "str", "chains": "count", "tuning": "object", "choices": "object"}
TUNING = {"gradients": "number", "grid": "list", "validation": "object", "oracle": "object", "warm_start": "object",
          "runs": "count", "budget": "null|count", "extended": "object"}
CHOICE = {"hp": "object", "seeds": "object", "to_floor": "object"}
SUMMARY = {"per_seed": "list", "reached": "count", "seeds": "count", "mean": "null|number", "se": "null|number"}
POINT = {"budget": "count", "gradients": "number", "seconds": "number", "divergent_chains": "count",
         "tv": "null|number", "energy": "null|number", "agreement": "null|number", "t_kin": "null|number",
         "ratios": "null|object"}


def _obj(value, where: str, fields: dict, required=None) -> dict:
    return check_json_object(value, where, fields, tuple(fields) if required is None else required, ConfigError)


def _kind(value, where: str, kinds: str):
    """`value`, or ConfigError "{where} is …, expected {kinds}" when it is of none of `kinds` (base.io's kinds)."""
    try:
        check_json_object({"v": value}, where, {"v": kinds}, (), ConfigError)
    except ConfigError:
        raise ConfigError(f"{where} is {json_type(value)}, expected {kinds.replace('|', ' or ')}") from None
    return value


def _items(values, where: str, kinds: str) -> list:
    """A JSON list whose every item is of `kinds` ("str", "count", "int", "null|number")."""
    for i, v in enumerate(values):
        _kind(v, f"{where}[{i}]", kinds)
    return values


def _curve(curve: dict, where: str) -> dict:
    _obj(curve, where, CURVE)
    for key, kinds in (("budgets", "count"), ("chains", "count"), ("seeds", "int")):
        _items(curve[key], f"{where}.{key}", kinds)
        if not curve[key] or (key != "seeds" and 0 in curve[key]):
            what = "integers" if key == "seeds" else "positive integers"
            raise ConfigError(f"{where}.{key} must be a non-empty list of {what}")
    if list(curve["budgets"]) != sorted(set(curve["budgets"])) or len(set(curve["seeds"])) != len(curve["seeds"]):
        raise ConfigError(f"{where}: budgets must increase and seeds be distinct")
    return curve


def _floors(floors: dict, where: str) -> None:
    _obj(floors, where, FLOORS, ("tv", "energy", "k", "resamples", "draws"))
    for key in ("tv", "energy"):
        _obj(floors[key], f"{where}.{key}", QUANTILES)
    if "predictive_variance" in floors:
        _obj(floors["predictive_variance"], f"{where}.predictive_variance", SPREAD)


def _points(points, where: str, budgets: list) -> None:
    if not isinstance(points, list):
        raise ConfigError(f"{where} is {json_type(points)}, expected a list of {len(budgets)} points (one per budget)")
    if len(points) != len(budgets):
        raise ConfigError(f"{where} holds {len(points)} points, expected {len(budgets)} (one per budget)")
    for i, point in enumerate(points):
        _obj(point, f"{where}[{i}]", POINT, ("budget", "gradients", "divergent_chains", "tv", "energy", "t_kin",
                                            "ratios"))
        if point["budget"] != budgets[i]:
            raise ConfigError(f"{where}[{i}]: budget {point['budget']!r}, the run's budget {i + 1} is {budgets[i]}")
        for name, r in (point["ratios"] or {}).items():
            _kind(r, f"{where}[{i}].ratios.{name}", "null|number")


def _choice(choice: dict, where: str, curve: dict) -> None:
    _obj(choice, where, CHOICE)
    seeds = [str(s) for s in curve["seeds"]]
    if list(choice["seeds"]) != seeds:
        raise ConfigError(f"{where}.seeds holds seeds {', '.join(choice['seeds']) or 'none'}, the run's are "
                          f"{', '.join(seeds)}")
    for seed, points in choice["seeds"].items():
        _points(points, f"{where}.seeds.{seed!r}", list(curve["budgets"]))
    _obj(choice["to_floor"], f"{where}.to_floor", {"tv": "object", "energy": "object"})
    for metric in ("tv", "energy"):
        s = _obj(choice["to_floor"][metric], f"{where}.to_floor.{metric}", SUMMARY)
        _items(s["per_seed"], f"{where}.to_floor.{metric}.per_seed", "null|positive")
        if len(s["per_seed"]) != len(seeds) or s["seeds"] != len(seeds) or s["reached"] > s["seeds"]:
            raise ConfigError(f"{where}.to_floor.{metric}: {len(s['per_seed'])} per-seed values, seeds "
                              f"{s['seeds']}, reached {s['reached']}, for the run's {len(seeds)} seeds")


def _row(row: dict, where: str, curve: dict) -> None:
    _obj(row, where, ROW)
    if row["chains"] == 0:
        raise ConfigError(f"{where}: field 'chains' is 0, expected a positive count")
    tuning = _obj(row["tuning"], f"{where}.tuning", TUNING, ("gradients", "grid", "validation", "oracle"))
    if "warm_start" in tuning:
        _obj(tuning["warm_start"], f"{where}.tuning.warm_start", {"hp": "object"})
    if "oracle" not in row["choices"]:
        raise ConfigError(f"{where}.choices: no choice 'oracle'")
    for name, choice in row["choices"].items():
        if name not in ("validation", "oracle"):
            raise ConfigError(f"{where}.choices: unknown choice {name!r} (validation, oracle)")
        _choice(choice, f"{where}.choices.{name}", curve)


def check_curve_result(result, where: str) -> dict:
    """Check a parsed curve.json against the module's schema.

    Args:
      result: the parsed file.
      where: the file, for messages.
    Returns:
      `result`; ConfigError (one line: the file, the field's path, what it is and what was expected) otherwise.
    """
    _obj(result, where, TOP, ("k", "curve", "methods", "tasks"))
    if result["k"] == 0:
        raise ConfigError(f"{where}: field 'k' is 0, expected a positive count of draws")
    curve = _curve(result["curve"], f"{where}: curve")
    _items(result["methods"], f"{where}: methods", "str")
    for method, why in (result.get("off_curve") or {}).items():
        _kind(why, f"{where}: off_curve.{method!r}", "str")
    if not result["tasks"]:
        raise ConfigError(f"{where}: no task (field 'tasks' is empty)")
    for name, task in result["tasks"].items():
        at = f"{where}: tasks.{name!r}"
        _obj(task, at, TASK, ("floors", "methods"))
        _items(task.get("replaced", []), f"{at}.replaced", "str")
        _floors(task["floors"], f"{at}.floors")
        if task["floors"]["k"] != result["k"]:
            raise ConfigError(f"{at}.floors: K = {task['floors']['k']}, the run's K is {result['k']}")
        for row_name, row in task["methods"].items():
            _row(row, f"{at}.methods.{row_name!r}", curve)
    return result
