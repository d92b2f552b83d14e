"""Write docs/api.md, the API reference, from the docstrings of the public names.

    python docs/make_api.py            # rewrite docs/api.md
    python docs/make_api.py --check    # exit 1 if docs/api.md is not what the code's docstrings give

Covers the sampler library's top level (`l2e.__all__`: every sampler's factory, `init` and `build_kernel`, its State
and Info fields; the types; chains; checkpoints and the learned-sampler registry), the task layer's entry points, and
the programmatic entry points of meta-training and evaluation. tests/test_docs.py runs the check.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "api.md"

SECTIONS = (
    ("Task layer (`tasks`)", "tasks", ("TaskSpec", "RegressionSpec", "ModelSpec", "Task", "TaskCache", "build",
                                      "TaskDistribution")),
    ("Meta-training (`meta_train`)", "meta_train", ("meta_train", "MetaTrainConfig", "PRESETS")),
    ("Evaluation (`evaluate`)", "evaluate", ("evaluate", "EvalConfig", "get_preset", "METHODS")),
)


def _doc(obj) -> str:
    """The docstring as a fenced text block (its line breaks and indentation are part of its layout)."""
    text = (inspect.getdoc(obj) or "(no docstring)").strip()
    return f"```text\n{text}\n```"


def _signature(name: str, obj) -> str:
    """name(parameters) -> return, with the memory addresses of default values' reprs removed (reproducible)."""
    try:
        return re.sub(r" at 0x[0-9a-f]+", "", f"{name}{inspect.signature(obj)}")
    except (TypeError, ValueError):
        return name


def _block(title: str, obj, level: str = "###") -> list[str]:
    sig = _signature(title, obj) if callable(obj) and not inspect.isclass(obj) else title
    return [f"{level} `{sig}`", "", _doc(obj), ""]


def _namedtuple_fields(cls) -> list[str]:
    return [f"- `{f}`" for f in getattr(cls, "_fields", ())]


def _sampler(name: str, api) -> list[str]:
    """A sampler of the l2e top level: its module doc, factory, init, build_kernel, State / Info."""
    module = api.module
    lines = [f"### `l2e.{name}` — module `{module.__name__}`", "", _doc(module), ""]
    lines += _block(f"l2e.{name}", api.factory, "####")
    for part in ("init", "build_kernel"):
        lines += _block(f"l2e.{name}.{part}", getattr(api, part), "####")
    for attr, obj in sorted(vars(module).items()):
        if inspect.isclass(obj) and obj.__module__ == module.__name__ and hasattr(obj, "_fields") \
                and attr.endswith(("State", "Info")):
            lines += [f"#### `{attr}`", "", _doc(obj), ""] + _namedtuple_fields(obj) + [""]
    return lines


def render() -> str:
    import l2e
    from l2e.types import SamplerAPI

    lines = ["# API reference", "",
             "Generated from the docstrings by `python docs/make_api.py` (tests/test_docs.py checks it is current); "
             "the concepts are in [samplers.md](samplers.md), [sampling.md](sampling.md) and "
             "[meta_training.md](meta_training.md).", "",
             "## The sampler library (`l2e`)", "", _doc(l2e), "", "## Samplers", ""]
    samplers = [n for n in l2e.__all__ if isinstance(getattr(l2e, n), SamplerAPI)]
    for name in samplers:
        lines += _sampler(name, getattr(l2e, name))
    lines += ["## Types, chains, checkpoints and the registry", ""]
    for name in l2e.__all__:
        if name in samplers:
            continue
        obj = getattr(l2e, name)
        if inspect.ismodule(obj):
            lines += [f"### `l2e.{name}`", "", _doc(obj), ""]
        else:
            lines += _block(f"l2e.{name}", obj)
    for title, package, names in SECTIONS:
        module = importlib.import_module(package)
        lines += [f"## {title}", "", _doc(module), ""]
        for name in names:
            obj = getattr(module, name, None)
            if obj is None:
                raise AttributeError(f"{package}.{name} is listed in docs/make_api.py but does not exist")
            if isinstance(obj, (dict, tuple)):
                shown = ", ".join(f"`{k}`" for k in obj)
                lines += [f"### `{package}.{name}`", "", shown, ""]
            else:
                lines += _block(f"{package}.{name}", obj)
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print("error: docs/api.md is out of date: run `python docs/make_api.py`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
