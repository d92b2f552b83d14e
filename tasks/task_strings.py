"""Task strings (grammar: tasks.spec_parse.GRAMMAR) to task specs: `resolve_task(text, model)` gives the
`TaskSpec` (classification) or `RegressionSpec` (Gaussian regression) with the likelihood it uses and why
(stated in the evaluation report), `resolve_tasks` a list of them (the CLIs' repeated --task), `weighted_specs`
a meta-training task list with weights.  The user's npz / csv files are read and checked here (to infer the
likelihood), so bad data is reported before anything runs."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from tasks.data.base import DatasetError
from tasks.models import ModelSpec
from tasks.regression import RegressionSpec
from tasks.spec_parse import USER_SOURCES, ParsedTask, TaskStringError, parse_task_string, split_list
from tasks.task import TaskSpec

__all__ = ["ResolvedTask", "TaskStringError", "resolve_task", "resolve_tasks", "weighted_specs"]

DEFAULT_PRIOR = {"classification": 0.2, "regression": 1.0}


@dataclass(frozen=True)
class ResolvedTask:
    """A task string's spec, the likelihood it uses ("classification" | "regression") and why, and its weight
    in a meta-training task list."""

    text: str
    spec: TaskSpec | RegressionSpec
    likelihood: str
    why: str
    weight: float = 1.0

    @property
    def note(self) -> str:
        """What the report says of the task (its "held out" line)."""
        return f"task string {self.text!r}; likelihood {self.likelihood} ({self.why})"


def _likelihood(p: ParsedTask) -> tuple[str, str]:
    given = p.options.get("likelihood")
    if p.source in USER_SOURCES:
        return (given, f"given: likelihood={given}") if given else _infer(p)
    natural, why = (("regression", "a UCI regression set") if p.source == "uci" or p.name == "synthetic_1d"
                    else ("classification", "a registered classification set"))
    if given is not None and given != natural:
        raise TaskStringError(f"task {p.text!r}: likelihood={given}, but {p.name!r} is {why}")
    return natural, why


def _infer(p: ParsedTask) -> tuple[str, str]:
    from tasks.data.user import infer_likelihood

    return infer_likelihood(p.dataset)


def _model(p: ParsedTask, factory: str | None) -> ModelSpec:
    if p.model is not None:
        return p.model
    if factory is None:
        raise TaskStringError(f"task {p.text!r} names no model: add /MODEL (e.g. /mlp-32x32, /cnn-c8-d2) or pass "
                              "--model pkg.module:Factory")
    return ModelSpec("flax", factory=factory)


def _regression_spec(p: ParsedTask, model: ModelSpec) -> RegressionSpec:
    o = p.options
    if model.kind not in ("mlp", "flax"):
        raise TaskStringError(f"task {p.text!r}: a regression task takes an MLP (mlp-50, mlp-32x32-tanh, "
                              f"mlp-linear) or --model, not {model.name}")
    for key in ("classes",) + (("valid",) if p.source not in USER_SOURCES else ()):
        if key in o:
            raise TaskStringError(f"task {p.text!r}: option {key}= does not apply to this regression task")
    protocol = o.get("protocol", "mile")
    if "split" in o and protocol != "standard":
        raise TaskStringError(f"task {p.text!r}: split= needs protocol=standard (the mile protocol uses seed=)")
    if p.source == "uci" and "seed" in o and protocol != "mile":
        raise TaskStringError(f"task {p.text!r}: seed= applies to protocol=mile (the standard protocol uses split=)")
    uci_seed = o.get("seed", 1) if p.source == "uci" else 1
    return RegressionSpec(p.dataset, hidden=model.hidden if model.kind == "mlp" else (),
                          prior_variance=o.get("prior", DEFAULT_PRIOR["regression"]), split=o.get("split", 0),
                          protocol=protocol, seed=uci_seed, data_dir=o.get("data"), activation=model.activation,
                          factory=model.factory, valid=o.get("valid"), max_train=o.get("max"),
                          noise=o.get("noise", "hetero"))


def resolve_task(text: str, model: str | None = None, weighted: bool = False) -> ResolvedTask:
    """The ResolvedTask of one task string; `model` ("pkg.module:Factory") for a string that names none;
    `weighted`: a meta-training list entry (weight= allowed).  TaskStringError / DatasetError (one line)."""
    p = parse_task_string(text)
    if "weight" in p.options and not weighted:
        raise TaskStringError(f"task {text!r}: weight= is for meta-training task lists (--set tasks=...)")
    spec_model = _model(p, model)
    likelihood, why = _likelihood(p)
    if "noise" in p.options and likelihood != "regression":
        raise TaskStringError(f"task {text!r}: noise= applies to regression tasks only")
    try:
        if likelihood == "regression":
            spec = _regression_spec(p, spec_model)
        else:
            spec = TaskSpec(p.dataset, spec_model, prior_variance=p.options.get("prior", DEFAULT_PRIOR[likelihood]),
                            data_dir=p.options.get("data"), max_train=p.options.get("max"),
                            valid=p.options.get("valid"))
    except DatasetError:
        raise
    except ValueError as e:
        raise TaskStringError(f"task {text!r}: {e}") from None
    if p.source in USER_SOURCES:  # every check of the user's data now, before anything runs or is written
        from tasks.data.user import load_user_classification, load_user_regression

        if likelihood == "regression":
            load_user_regression(p.dataset, spec.valid)
        else:
            load_user_classification(p.dataset)
    return ResolvedTask(p.text, spec, likelihood, why, p.options.get("weight", 1.0))


def resolve_tasks(texts, model: str | None = None) -> list[ResolvedTask]:
    """The ResolvedTasks of repeated --task strings; `model` must be used by at least one of them."""
    tasks = [resolve_task(t, model) for t in texts]
    if model is not None and not any(getattr(t.spec, "factory", None) or
                                     getattr(getattr(t.spec, "model", None), "factory", None) for t in tasks):
        raise TaskStringError(f"--model {model} is not used: every --task names its own model (drop the /MODEL "
                              "part of the tasks that should use it)")
    return tasks


@functools.lru_cache(maxsize=16)
def weighted_specs(texts: tuple[str, ...]) -> tuple[tuple, tuple[float, ...]]:
    """(specs, weights) of a meta-training task list (each entry a task string, optionally :weight=W)."""
    resolved = [resolve_task(t, weighted=True) for t in texts]
    seen = {}
    for r in resolved:
        if r.spec in seen:
            raise TaskStringError(f"task list names the same task twice: {seen[r.spec]!r} and {r.text!r} (give it "
                                  "a weight instead)")
        seen[r.spec] = r.text
    return tuple(r.spec for r in resolved), tuple(r.weight for r in resolved)


def parse_task_list(value: str) -> tuple[str, ...]:
    """The task strings of `--set tasks=...`: comma-separated, or "@FILE" (one per line, # comments)."""
    if value.startswith("@"):
        from base.io import read_bounded
        from tasks.limits import MAX_TASK_LIST_BYTES

        path = value[1:]
        try:
            text = read_bounded(path, MAX_TASK_LIST_BYTES).decode("utf-8")
        except OSError as e:
            raise TaskStringError(f"task list {path}: cannot read ({e.strerror or type(e).__name__})") from None
        except UnicodeDecodeError:
            raise TaskStringError(f"task list {path}: not UTF-8 text") from None
        lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        items = tuple(line for line in lines if line)
        if not items:
            raise TaskStringError(f"task list {path}: no task strings")
        return items
    return tuple(split_list(value))
