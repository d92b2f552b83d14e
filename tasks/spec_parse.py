"""Task strings: the one grammar of a task on the command line (`python -m evaluate --task`, `python -m evaluate
reference --task`, meta-training's `--set tasks=...`).  This module is syntax only (no data is read);
tasks.task_strings turns a parsed string into a TaskSpec / RegressionSpec.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from tasks.models import ACTIVATIONS, ModelSpec

GRAMMAR = """\
TASK   := DATA ["/" MODEL] {":" KEY "=" VALUE}
DATA   := NAME          a registered set: digits, breast_cancer, wine, iris, synthetic_images, mnist,
                        fashion_mnist, kmnist, bloodmnist (MedMNIST), cifar10, emnist_byclass, ...
        | "uci:" NAME   a UCI regression set ($L2E_DATA_DIR/uci/NAME or ~/.cache/l2e/uci/NAME):
                        naval-propulsion-plant, power-plant, wine-quality-red, yacht, energy, concrete, ...
        | "tfds:" NAME  a TensorFlow Datasets image classification set
        | "npz:" PATH   your arrays: x_train, y_train, x_test, y_test (x_valid, y_valid optional)
        | "csv:" PATH   your table: a header row, numeric columns; needs :target=COLUMN
MODEL  := "mlp-" W{"x"W}["-" ACT] | "mlp-linear" | "cnn-c" C "-d" D ["-res"] | "resnet20-frn" | "fmnist-1conv"
ACT    := relu | tanh | gelu | silu | elu                          (default relu)
KEY=VALUE (each at most once; they may also stand between DATA and "/MODEL"):
  prior=V          prior variance of p(θ) = N(0, V·I)  (default 0.2 classification, 1.0 regression)
  noise=N          regression: hetero (the network predicts each point's noise scale, default) | homo (one
                   learned noise scale for every point)
  likelihood=L     classification | regression  (default: registered and tfds sets classification, uci
                   regression, npz/csv inferred from the targets: integers -> classification, non-integers ->
                   regression; whole numbers stored as floats are ambiguous and need this option)
  valid=F          fraction of the training rows held out for validation (default 0.2 classification, halved
                   into inner / outer validation; 0.1 regression); not for uci (use protocol/split/seed)
  max=N            at most N training examples (the first N)
  target=COLUMN    csv: the target column (required)
  classes=C        npz/csv classification: number of classes (default 1 + the largest y_train label)
  test=F           csv: fraction of the (shuffled) rows used as the test set (default 0.2)
  seed=S           csv: row-shuffle seed (default 0); uci: the MILE protocol's shuffle seed (default 1)
  protocol=P       uci: mile (70/10/20 shuffle, default) | standard (Gal & Ghahramani split files)
  split=K          uci, protocol=standard: split index (default 0)
  data=DIR         registered / uci sets: the data folder (default $L2E_DATA_DIR, else ~/.cache/l2e)
  weight=W         meta-training task lists only: relative probability of drawing this task (default 1)
Without MODEL the model is `--model pkg.module:Factory` (Factory(input_shape, num_outputs) -> flax module).
Examples: uci:naval-propulsion-plant/mlp-50   kmnist/cnn-c8-d2-res   breast_cancer/mlp-32x32-tanh
          npz:data/mine.npz/mlp-64   csv:data/mine.csv:target=price/mlp-32x32   cifar10/resnet20-frn:prior=0.2"""
"""The task-string grammar, as printed by `--help` and docs/data.md."""

SOURCES = ("uci", "tfds", "npz", "csv")
"""Prefixes of DATA (a bare NAME is a registered set)."""
USER_SOURCES = ("npz", "csv")
LIKELIHOODS = ("classification", "regression")
UCI_PROTOCOLS = ("mile", "standard")
DATA_OPTIONS = ("target", "classes", "test", "seed")
"""Options of npz/csv data that are part of the data's identity (kept in the dataset string)."""

_MODEL_RE = re.compile(
    r"^(?:mlp-(?P<widths>\d{1,9}(?:x\d{1,9})*|linear)(?:-(?P<act>[a-z]+))?"
    r"|cnn-c(?P<c>\d{1,9})-d(?P<d>\d{1,9})(?P<res>-res)?"
    r"|(?P<named>resnet20[-_]frn|fmnist[-_]1conv))$")


class TaskStringError(ValueError):
    """A task string that does not follow the grammar (or names options its data cannot take); one line."""


def _positive_float(v: str) -> float:
    x = float(v)
    if not 0 < x < float("inf"):
        raise ValueError
    return x


def _fraction(v: str) -> float:
    x = float(v)
    if not 0 < x < 1:
        raise ValueError
    return x


def _positive_int(v: str) -> int:
    x = int(v)
    if x < 1:
        raise ValueError
    return x


def _natural(v: str) -> int:
    x = int(v)
    if x < 0:
        raise ValueError
    return x


def _choice(options):
    def parse(v: str) -> str:
        if v not in options:
            raise ValueError
        return v
    parse.expected = " | ".join(options)
    return parse


def _text(v: str) -> str:
    if not v:
        raise ValueError
    return v


OPTIONS = {  # key -> (parser, what it expects, sources that take it; None: every source)
    "prior": (_positive_float, "a positive number", None),
    "likelihood": (_choice(LIKELIHOODS), " | ".join(LIKELIHOODS), None),
    "valid": (_fraction, "a fraction in (0, 1)", ("", "tfds", "npz", "csv")),
    "max": (_positive_int, "a positive integer", None),
    "target": (_text, "a column name", ("csv",)),
    "classes": (_positive_int, "a positive integer", ("npz", "csv")),
    "test": (_fraction, "a fraction in (0, 1)", ("csv",)),
    "seed": (_natural, "a non-negative integer", ("csv", "uci")),
    "protocol": (_choice(UCI_PROTOCOLS), " | ".join(UCI_PROTOCOLS), ("uci",)),
    "split": (_natural, "a non-negative integer", ("uci",)),
    "data": (_text, "a folder", ("", "uci", "tfds")),
    "weight": (_positive_float, "a positive number", None),
    "noise": (_choice(("hetero", "homo")), "hetero | homo", ("uci", "npz", "csv", "")),
}


@dataclass(frozen=True)
class ParsedTask:
    """A task string taken apart: source ("" for a registered set, else one of SOURCES), name (set name or
    path), model (None: not given) and the options, each parsed to its type."""

    text: str
    source: str
    name: str
    model: ModelSpec | None
    options: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def dataset(self) -> str:
        """The dataset string of the spec: "digits", "uci:yacht", "tfds:x", "npz:PATH",
        "csv:PATH:target=price" (npz/csv data options in DATA_OPTIONS order)."""
        if not self.source:
            return self.name
        extra = "".join(f":{k}={self.options[k]}" for k in DATA_OPTIONS
                        if k in self.options and self.source in USER_SOURCES)
        return f"{self.source}:{self.name}{extra}"


def parse_model(token: str) -> ModelSpec | None:
    """The ModelSpec a MODEL token names, or None when `token` is not a MODEL of the grammar."""
    m = _MODEL_RE.match(token)
    if m is None:
        return None
    if m["named"]:
        return ModelSpec(m["named"].replace("-", "_"))
    if m["c"] is not None:
        return ModelSpec("cnn", channels=int(m["c"]), depth=int(m["d"]), residual=bool(m["res"]))
    act = m["act"] or "relu"
    if act not in ACTIVATIONS:
        return None
    widths = () if m["widths"] == "linear" else tuple(int(w) for w in m["widths"].split("x"))
    if any(w < 1 for w in widths):
        return None
    return ModelSpec("mlp", hidden=widths, activation=act)


def _option(text: str, token: str, source: str) -> tuple[str, object]:
    key, eq, value = token.partition("=")
    if not eq or not key:
        raise TaskStringError(f"task {text!r}: {token!r} is not KEY=VALUE (a model must follow the data after "
                              f"'/': mlp-32x32, cnn-c8-d2, ...)")
    if key not in OPTIONS:
        raise TaskStringError(f"task {text!r}: unknown option {key!r} (known: {', '.join(OPTIONS)})")
    parse, expected, sources = OPTIONS[key]
    if sources is not None and source not in sources:
        where = [s + ":" if s else "registered sets" for s in sources]
        raise TaskStringError(f"task {text!r}: option {key}= applies only to {', '.join(where)}")
    try:
        return key, parse(value)
    except ValueError:
        raise TaskStringError(f"task {text!r}: bad value for {key}: {value!r} (expected {expected})") from None


def _split_model(tokens: list[str]) -> tuple[list[str], ModelSpec | None]:
    """Find "/MODEL" at the end of the data token or of an option token before it; strip it."""
    for i, token in enumerate(tokens):
        before, slash, last = token.rpartition("/")
        model = parse_model(last) if slash else None
        if model is not None:
            return tokens[:i] + [before] + tokens[i + 1:], model
    return tokens, None


def parse_task_string(text: str) -> ParsedTask:
    """Parse one task string (see GRAMMAR); TaskStringError on any syntax error.  No file is read."""
    if not isinstance(text, str) or not text.strip():
        raise TaskStringError("empty task string (expected DATA/MODEL, e.g. digits/mlp-32)")
    text = text.strip()
    prefix, colon, rest = text.partition(":")
    source = prefix if colon and prefix in SOURCES else ""
    tokens, model = _split_model((rest if source else text).split(":"))
    name, options = tokens[0], {}
    if not name:
        raise TaskStringError(f"task {text!r}: no data before the model (expected DATA/MODEL)")
    if source in ("", "uci", "tfds") and "/" in name and not name.startswith("cifar10_corrupted/"):
        raise TaskStringError(f"task {text!r}: {name.rpartition('/')[2]!r} is not a model (expected mlp-32x32, "
                              f"mlp-50-tanh, mlp-linear, cnn-c8-d2[-res], resnet20-frn, fmnist-1conv)")
    for token in tokens[1:]:
        key, value = _option(text, token, source)
        if key in options:
            raise TaskStringError(f"task {text!r}: option {key}= given twice")
        options[key] = value
    if source == "csv" and "target" not in options:
        raise TaskStringError(f"task {text!r}: a csv task needs :target=COLUMN (the column to predict)")
    return ParsedTask(text, source, name, model, options)


def split_dataset(dataset: str) -> tuple[str, str, dict]:
    """(source, path, data options) of an npz/csv dataset string (`ParsedTask.dataset`)."""
    source, _, rest = dataset.partition(":")
    path, *tokens = rest.split(":")
    options = dict(_option(dataset, t, source) for t in tokens)
    return source, path, options


def split_list(value: str) -> list[str]:
    """The task strings of a comma-separated list (meta-training's `--set tasks=a,b`)."""
    items = [s.strip() for s in value.split(",")]
    if not any(items):
        raise TaskStringError("empty task list (expected comma-separated task strings, e.g. digits/cnn-c4-d1,"
                              "uci:yacht/mlp-50:weight=2)")
    if not all(items):
        raise TaskStringError(f"empty entry in task list {value!r}")
    return items
