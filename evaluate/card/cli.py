"""`python -m evaluate card`: the sampler card (evaluate.card) for every minibatch sampler, written as
card.json, card.md and card.png in --output; with --analytic, SMILE's analytic benchmark (evaluate.card.analytic)
for the same samplers and the SMILE family, written as analytic.json, analytic.md and analytic.png."""
from __future__ import annotations

import json
from pathlib import Path

import l2e
from evaluate.card.report import card_markdown, plot_card
from evaluate.card.run import hand_designed, learned_builder, sampler_card
from evaluate.card.targets import CardConfig
from evaluate.card import update as U
from evaluate.methods.l2e_released import default_released_path
from base.io import ConfigError, atomic_write_text
from cli import apply_overrides


def _shipped_label(name: str) -> str:
    """The card's row label of a shipped checkpoint: "l2e (paper-form)" for the paper form, else "<name> (shipped)"."""
    return "l2e (paper-form)" if name == "paper-form" else f"{name} (shipped)"


def card_samplers(sampler_path=None, released_path=None, learned=learned_builder,
                  freeze_step: int = 1) -> tuple[dict, list[str]]:
    """(name -> builder, notes): the hand-designed samplers, the shipped paper-form L2E, Kinetic-L2E, Mass-L2E and the
    published rows (Meta-SGMCMC, Precond-L2E, Small-L2E), a user checkpoint (`sampler_path`) and the authors' released
    L2E (`released_path`, default `default_released_path()`; skipped with a note when absent); `learned(meta_params,
    config, factory)` builds the learned samplers' builders (factory: l2e.l2e, l2e.kinetic, l2e.mass,
    l2e.meta_sgmcmc).  freeze_step: the update at which a sampler that freezes constants before sampling (Mass-L2E)
    freezes them (the card's burn-in)."""
    from l2e.released import load_released

    from l2e.checkpoint import sampler_kind
    from l2e.learned import REGISTRY, shipped

    samplers, notes = dict(hand_designed()), []
    checkpoints = [(_shipped_label(name), name) for name in shipped()]
    checkpoints += [(f"learned ({sampler_path})", sampler_path)] if sampler_path is not None else []
    for label, where in checkpoints:
        params, config, meta = l2e.load_meta_params(where)
        entry = REGISTRY[sampler_kind(meta)]
        config = entry.sampling_config(config, freeze_step)  # what freezes before sampling freezes at the burn-in
        samplers[label] = learned(params, config, entry.factory)
    path = Path(released_path) if released_path is not None else default_released_path()
    if path.exists():
        params, config = load_released(path)
        samplers["l2e (released)"] = learned(params, config)
    elif released_path is not None:
        raise ConfigError(f"released meta-parameters not found: {path}")
    else:
        notes.append(f"l2e (released) skipped: {path} not found")
    return samplers, notes


def run_card(out: Path, sampler_path=None, released_path=None, overrides=(), progress=None, methods=None,
             update: dict | None = None) -> dict:
    """Validate everything, run the card (only the samplers named in `methods`, evaluate.card.update.select), write
    card.json / card.md / card.png into `out` (created); with `update` (a card read from --output), its rows merged
    (evaluate.card.update.merge) with this run's."""
    cfg = apply_overrides(CardConfig(), list(overrides)).check()
    samplers, notes = card_samplers(sampler_path, released_path, freeze_step=cfg.burn_in)
    samplers = U.select(samplers, methods, notes)
    card = sampler_card(samplers, cfg, progress=progress)
    card["notes"] = notes if methods is None else []
    card = card if update is None else U.merge(update, card, methods)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "card.json", json.dumps(card, indent=1))
    atomic_write_text(out / "card.md", "# Sampler card\n\n" + card_markdown(card)
                      + "".join(f"\n{n}\n" for n in card["notes"]))
    plot_card(card, out / "card.png")
    return card


def run_analytic_card(out: Path, sampler_path=None, released_path=None, overrides=(), progress=None,
                      large: bool = False, methods=None, update: dict | None = None) -> dict:
    """Validate everything, run the analytic benchmark (AnalyticConfig(), or LARGE with `large`, then `overrides`)
    for the card's samplers and the SMILE family (only those named in `methods`), write analytic.json / .md / .png
    into `out` (created); with `update` (a benchmark read from --output), merged with this run's."""
    from evaluate.card import analytic as ca

    cfg = apply_overrides(ca.LARGE if large else ca.AnalyticConfig(), list(overrides)).check()
    freeze = cfg.burn_in or cfg.num_steps // 10  # Mass-L2E needs a burn-in to set its constants from
    samplers, notes = card_samplers(sampler_path, released_path, freeze_step=freeze)
    res = ca.run_analytic(cfg, U.select({**samplers, **ca.smile_builders()}, methods, notes), progress)
    res["notes"] = notes if methods is None else []
    res = res if update is None else U.merge(update, res, methods)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "analytic.json", json.dumps(res, indent=1))
    atomic_write_text(out / "analytic.md", "# Analytic benchmark (the SMILE paper's analytic benchmark)\n\n" + ca.analytic_markdown(res)
                      + "".join(f"\n{n}\n" for n in res["notes"]))
    ca.plot_analytic(res, out / "analytic.png")
    return res


def build_card_parser():
    from cli import OneLineErrorParser

    from cli.limits import HELP as LIMITS

    p = OneLineErrorParser(prog="python -m evaluate card", epilog=f"{LIMITS}.",
                           description="The sampler card: every minibatch sampler on known targets with gradient noise.")
    p.add_argument("--method", dest="user_methods", action="append", default=[], metavar="PKG.MODULE:NAME",
                   help="your own sampler (a factory with an optional grid attribute, or an evaluate.methods.Method "
                        "with a card builder), named NAME in PKG.MODULE on the Python path: carded beside ours, a "
                        "factory at its grid's first point (repeatable)")
    p.add_argument("--methods", default=None, metavar="NAME,NAME",
                   help="run only these samplers, by their row names on the card (e.g. policy,policy_learned or "
                        "'kinetic (shipped)'; default: all)")
    p.add_argument("--update", action="store_true",
                   help="with --methods: merge their new rows into the card (or analytic benchmark) already in "
                        "--output, every other row kept; the configuration must be the one it was run with")
    p.add_argument("--output", default="runs/card", help="card directory (default: runs/card)")
    p.add_argument("--sampler", default=None, help="also card this L2E checkpoint (run dir, checkpoints/ or step dir)")
    p.add_argument("--released", default=None,
                   help="the L2E authors' meta_params.pickle or its directory (default: $L2E_DATA_DIR/l2e_released, "
                        "else ~/.cache/l2e/l2e_released; skipped with a note when absent)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a CardConfig field, e.g. --set num_steps=100000 --set noise=0 (with --analytic: "
                        "an AnalyticConfig field, e.g. --set seeds=7)")
    p.add_argument("--analytic", nargs="?", const="default", choices=("default", "large"), default=None,
                   help="run SMILE's analytic benchmark instead (evaluate.card.analytic; 'large': its LARGE budget)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing card in --output")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def _check_card_output(out: Path, name: str, overwrite: bool) -> None:
    """Refuse an --output that is not a directory, holds another output of ours or anything that is not a card of
    ours (no card marker, cli.outputs), or holds this card without --overwrite; probe writability."""
    from cli.outputs import check_output_dir
    from evaluate.report import probe_writable

    check_output_dir(out, "card", f"{name}.json", overwrite, ConfigError)
    probe_writable(out, ConfigError)


def _check_card_config(args, out: Path, name: str) -> dict | None:
    """The --set overrides on the card's (or the analytic benchmark's) config and --methods / --update, checked
    before anything is written. Returns the config (a dict) the result to update must have, or None without
    --update (`_read_update` reads that result under the output lock)."""
    import dataclasses

    from evaluate.card import analytic as ca

    base = (ca.LARGE if args.analytic == "large" else ca.AnalyticConfig()) if args.analytic else CardConfig()
    cfg = apply_overrides(base, list(args.overrides)).check()
    args.methods = U.parse_methods(args.methods)
    if args.methods is not None:  # every name checked against the card's samplers before anything runs
        samplers, notes = card_samplers(args.sampler, args.released)
        U.select({**samplers, **(ca.smile_builders() if args.analytic else {})}, args.methods, notes)
    if not args.update:
        return None
    if args.methods is None:
        raise ConfigError("--update needs --methods (the samplers whose rows it replaces)")
    _read_update(out, name, dataclasses.asdict(cfg))  # refused before anything is written; read again under the lock
    return dataclasses.asdict(cfg)


def _read_update(out: Path, name: str, config: dict) -> dict:
    """The result in --output that --update merges into (checked: ours, with `config`); ConfigError otherwise."""
    path = out / f"{name}.json"
    if not path.is_file():
        raise ConfigError(f"--update: no {name}.json in --output {out} to update")
    try:
        old = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"--update: {path} is not a result of ours ({type(e).__name__})") from None
    if not isinstance(old, dict):
        raise ConfigError(f"--update: {path} is not a result of ours (not a JSON object)")
    U.check_same_config(old, config, str(path))
    return old


def _card_run(args, out: Path, name: str, progress, update: dict | None) -> tuple[dict, str]:
    """Compute the card (or the analytic benchmark) into a staging directory and publish it as `out` (the card
    marker added; card.* and analytic.* of an earlier run kept unless replaced). Returns (result, Markdown)."""
    from cli import publish_dir, staging_dir
    from evaluate.card.analytic import analytic_markdown

    stage = staging_dir(out)
    if args.analytic:
        res = run_analytic_card(stage, args.sampler, args.released, args.overrides, progress, args.analytic == "large",
                                args.methods, update)
        text = analytic_markdown(res)
    else:
        res = run_card(stage, args.sampler, args.released, args.overrides, progress, args.methods, update)
        text = card_markdown(res)
    publish_dir(stage, out, (f"{name}.json", f"{name}.md", f"{name}.png"), kind="card")
    return res, text


def card_main(argv) -> int:
    """`python -m evaluate card ...`: validate (output, overrides, checkpoints) before running, hold the --output lock
    while running (a second card on the same --output is refused), SIGTERM / SIGINT end it with one line and the
    output unchanged; one-line errors."""
    import sys

    from cli import OutputLock, handle_sigterm
    from evaluate.cli_common import failed_run
    from l2e.released import ReleasedFormatError

    args = build_card_parser().parse_args(argv)
    out, lock = Path(args.output), None
    name = "analytic" if args.analytic else "card"
    try:
        handle_sigterm()
        _check_card_output(out, name, args.overwrite or args.update)
        config = _check_card_config(args, out, name)
        lock = OutputLock(out, ConfigError)
        update = None if config is None else _read_update(out, name, config)  # under the lock: no writer between
        progress = None if args.quiet else (lambda line: print(f"{name}: {line}", flush=True))
        res, text = _card_run(args, out, name, progress, update)
        lock.release(failed=False)
    except (KeyboardInterrupt, ConfigError, l2e.CheckpointError, ReleasedFormatError, ValueError, OSError) as e:
        return failed_run(e, lock, f"{args.output} is unchanged")
    print(text)
    print(f"{name}: {out / f'{name}.md'} (json: {out / f'{name}.json'}, plot: {out / f'{name}.png'})")
    sys.stdout.flush()
    return 0
