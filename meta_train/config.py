"""Meta-training configuration: frozen dataclasses, presets, and `key=value` overrides."""
from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

from l2e.chains import ChainSchedule
from l2e.l2e import L2EConfig
from tasks.distribution import TaskDistribution


class ConfigError(ValueError):
    """A configuration the user gave that cannot be used (unknown key, bad value)."""


@dataclasses.dataclass(frozen=True)
class ESConfig:
    """Antithetic OpenAI-ES (evosax Open_ES) with an optax outer optimiser.

    population: ES members (even; pairs = population/2); sigma: perturbation std;
    lr: Adam learning rate; clip_norm: global-norm gradient clip; reset_optimizer: rebuild Adam every
    iteration (the released code's behaviour, ≈ sign-SGD) instead of keeping its state.
    divergence_penalty: fitness given to a member whose meta-loss is not finite.
    execution: how the population's inner chains run — "vmap" (one program over the batched members,
    sharded over the device mesh: the GPU/TPU and multi-host path), "sequential" (each member is an ordinary
    single-chain program, dispatched round-robin over the local devices: on XLA:CPU a vmapped conv net
    becomes a slow grouped convolution), or "auto" (sequential on a single-process CPU, vmap otherwise).
    The modes agree to float32 rounding (tests/test_meta_train.py).
    """

    population: int = 2
    sigma: float = 0.01
    lr: float = 0.01
    clip_norm: float = 1.0
    reset_optimizer: bool = False
    divergence_penalty: float = 100.0
    execution: str = "auto"

    def __post_init__(self):
        if self.execution not in ("auto", "vmap", "sequential"):
            raise ConfigError(f"es.execution must be auto, vmap or sequential, got {self.execution!r}")
        if self.population < 2 or self.population % 2:
            raise ConfigError(f"es.population must be a positive even number, got {self.population}")
        for name in ("sigma", "lr", "clip_norm", "divergence_penalty"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"es.{name} must be positive, got {getattr(self, name)}")


META_INITS = ("sghmc", "random")


@dataclasses.dataclass(frozen=True)
class MetaTrainConfig:
    """Everything that determines a meta-training run (with the seed, its numbers are reproducible).

    meta_init: "random" (haiku-style init, as the paper) or "sghmc" (the MLP first fitted to
    α ≈ 0, β ≈ normalised momentum; see l2e.meta_model.sghmc_like_meta_params).
    """

    seed: int = 0
    num_outer: int = 100
    meta_loss_examples: int = 512
    checkpoint_every: int = 10
    hidden: tuple[int, ...] = (32, 32)
    meta_init: str = "sghmc"
    es: ESConfig = ESConfig()
    sampler: L2EConfig = L2EConfig()
    inner: ChainSchedule = ChainSchedule(num_steps=3000, num_samples=10, thinning=50, batch_size=128)
    tasks: TaskDistribution = TaskDistribution(datasets=("digits",))

    def __post_init__(self):
        if self.meta_init not in META_INITS:
            raise ConfigError(f"meta_init must be one of {META_INITS}, got {self.meta_init!r}")
        for name in ("num_outer", "meta_loss_examples", "checkpoint_every"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))


PRESETS: dict[str, MetaTrainConfig] = {
    # under a minute end to end: one small task, a short chain, a few outer steps
    "smoke": MetaTrainConfig(
        num_outer=4, meta_loss_examples=128, checkpoint_every=2,
        sampler=L2EConfig(learning_rate=0.5, alpha_scale=0.1, beta_scale=0.1),
        inner=ChainSchedule(num_steps=40, num_samples=3, thinning=5, batch_size=32, chunk=2),
        tasks=TaskDistribution(datasets=("digits",), channels=(4,), depths=(1,), residual=(False,)),
    ),
    # the embedded default: offline data (sklearn digits + generated images), ≤ 10 minutes on 2 CPU cores
    "default": MetaTrainConfig(
        num_outer=300, meta_loss_examples=256, checkpoint_every=25,
        sampler=L2EConfig(learning_rate=0.5, alpha_scale=0.1, beta_scale=0.1),
        inner=ChainSchedule(num_steps=300, num_samples=10, thinning=10, batch_size=64, chunk=2),
        tasks=TaskDistribution(datasets=("digits", "synthetic_images"), channels=(4, 8), depths=(1, 2),
                               residual=(False, True)),
    ),
    # the paper's setting (spec §5, §9): MNIST, Fashion-MNIST, EMNIST (byclass, 62-class head) and BloodMNIST
    # × CNN channels {4, 8, 16} × depth 1–5 × residual on/off = 120 tasks; 3000 inner steps, 10 samples every
    # 50 steps over the last 500, batch 128; one antithetic pair, σ 0.01, Adam 0.01 (state kept, §9.5);
    # lr = ε²N 0.5, friction 0.1, T 1, output scales 1e-3 (§3, §9.3; configurable: sampler.alpha_scale/...).
    # Needs the data: TFDS (mnist, fashion_mnist, emnist; set L2E_TFDS_DOWNLOAD=1 to download) and
    # bloodmnist.npz in $L2E_DATA_DIR/medmnist (or tasks.data_dir). Without TFDS, e.g.:
    #   --preset paper --set tasks.datasets=mnist --set tasks.data_dir=../shared/data/mnist --set tasks.max_train=2000
    "paper": MetaTrainConfig(
        num_outer=1000, meta_loss_examples=512, checkpoint_every=100, meta_init="random",
        es=ESConfig(population=2, sigma=0.01, lr=0.01, clip_norm=1.0),
        sampler=L2EConfig(learning_rate=0.5, friction=0.1, temperature=1.0, alpha_scale=1e-3, beta_scale=1e-3),
        inner=ChainSchedule(num_steps=3000, num_samples=10, thinning=50, batch_size=128, chunk=10),
        tasks=TaskDistribution(datasets=("mnist", "fashion_mnist", "emnist_byclass", "bloodmnist"),
                               channels=(4, 8, 16), depths=(1, 2, 3, 4, 5), residual=(False, True)),
    ),
}


def _convert(value: str, typ: Any, key: str) -> Any:
    origin = typing.get_origin(typ)
    try:
        if typ is bool:
            if value.lower() in ("1", "true", "yes"):
                return True
            if value.lower() in ("0", "false", "no"):
                return False
            raise ValueError(value)
        if typ in (int, float, str):
            return typ(value)
        if origin is tuple:
            inner = typing.get_args(typ)[0]
            items = [v for v in value.replace("(", "").replace(")", "").split(",") if v.strip()]
            return tuple(_convert(v.strip(), inner, key) for v in items)
        if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
            args = [a for a in typing.get_args(typ) if a is not type(None)]
            if value.lower() in ("none", "null", ""):
                return None
            return _convert(value, args[0], key)
    except ValueError:
        raise ConfigError(f"bad value for {key}: {value!r} (expected {getattr(typ, '__name__', typ)})") from None
    raise ConfigError(f"cannot set {key} from the command line")


def apply_overrides(config: Any, overrides: list[str], prefix: str = "") -> Any:
    """Return `config` with each "a.b=value" applied; unknown keys raise ConfigError."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override must look like key=value, got {item!r}")
        key, value = item.split("=", 1)
        config = _set(config, key.strip().split("."), value.strip(), key.strip())
    return config


def _set(obj: Any, path: list[str], value: str, full: str) -> Any:
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    if path[0] not in names:
        raise ConfigError(f"unknown config key: {full} (known here: {', '.join(sorted(names))})")
    current = getattr(obj, path[0])
    if len(path) == 1:
        if dataclasses.is_dataclass(current):
            raise ConfigError(f"{full} is a group; set one of its keys, e.g. {full}.<key>=…")
        new = _convert(value, hints[path[0]], full)
    else:
        if not dataclasses.is_dataclass(current):
            raise ConfigError(f"unknown config key: {full}")
        new = _set(current, path[1:], value, full)
    try:
        return dataclasses.replace(obj, **{path[0]: new})
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e).splitlines()[0]) from None


def from_dict(d: dict) -> MetaTrainConfig:
    """Rebuild a config from `to_dict()` output (lists back to tuples)."""

    def build(cls, data):
        hints = typing.get_type_hints(cls)
        kw = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            v, t = data[f.name], hints[f.name]
            if dataclasses.is_dataclass(t):
                v = build(t, v)
            elif isinstance(v, list):
                v = tuple(tuple(x) if isinstance(x, list) else x for x in v)
            kw[f.name] = v
        return cls(**kw)

    return build(MetaTrainConfig, d)
