"""Flax networks of the task family: classifiers (small CNNs, plain or residual; MLPs; the paper's evaluation
nets) returning logits (B, C), and the location/scale MLP of the regression tasks."""
from __future__ import annotations

from dataclasses import dataclass

import flax.linen as nn
import jax
import jax.numpy as jnp

from tasks.likelihoods.gaussian import loc_scale
from tasks.limits import MAX_LAYERS, MAX_WIDTH

MODEL_KINDS = ("cnn", "mlp", "fmnist_1conv", "resnet20_frn", "flax")
ACTIVATIONS = ("relu", "tanh", "gelu", "silu", "elu")
"""Hidden-layer activations of the MLPs (flax.linen functions of these names)."""
IMAGE_KINDS = frozenset({"cnn", "fmnist_1conv", "resnet20_frn"})
"""Model kinds that need (H, W, C) image inputs."""


@dataclass(frozen=True)
class ModelSpec:
    """Architecture. kind "cnn" uses channels/depth/residual; kind "mlp" uses hidden (widths of hidden layers).

    Evaluation models of the paper (other fields ignored): "fmnist_1conv" (Fashion-MNIST: 3×3 conv 32 → ReLU →
    max-pool → Dense 20 → Dense classes) and "resnet20_frn" (CIFAR: ResNet-20 with filter response
    normalisation + TLU and Swish, no batch norm; Izmailov et al. 2021).
    activation: the MLP's hidden activation (ACTIVATIONS).  kind "flax": the user's model, `factory` =
    "pkg.module:Factory" with Factory(input_shape, num_outputs) -> a flax module (tasks.user_model).
    """

    kind: str = "cnn"
    channels: int = 8
    depth: int = 1
    residual: bool = False
    hidden: tuple[int, ...] = (20,)
    activation: str = "relu"
    factory: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"ModelSpec.kind must be one of {', '.join(MODEL_KINDS)}, got {self.kind!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"ModelSpec.activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        if (self.kind == "flax") != (self.factory is not None):
            raise ValueError("ModelSpec: kind 'flax' needs factory='pkg.module:Factory' (and only it takes one)")
        if self.channels < 1 or self.depth < 1 or any(h < 1 for h in self.hidden):
            raise ValueError(
                f"ModelSpec sizes must be positive: channels={self.channels}, depth={self.depth}, hidden={self.hidden}"
            )
        if max((self.channels, *self.hidden)) > MAX_WIDTH or max(self.depth, len(self.hidden)) > MAX_LAYERS:
            raise ValueError(f"ModelSpec sizes above the resource limits (layers of at most {MAX_WIDTH:.0e} units, at "
                             f"most {MAX_LAYERS} layers): channels={self.channels}, depth={self.depth}, "
                             f"{len(self.hidden)} hidden layers up to {max(self.hidden, default=0)} wide")

    @property
    def name(self) -> str:
        """E.g. "cnn-c8-d2", "cnn-c8-d2-res", "mlp-32x32", "mlp-32x32-tanh", "mlp-linear", "pkg.mod:Factory"."""
        if self.kind == "flax":
            return self.factory
        if self.kind == "mlp":
            return mlp_name(self.hidden, self.activation)
        if self.kind != "cnn":
            return self.kind.replace("_", "-")
        return f"cnn-c{self.channels}-d{self.depth}" + ("-res" if self.residual else "")


class CNN(nn.Module):
    """depth × [3×3 Conv → ReLU] → 2×2 max-pool → flatten → head; x (B, H, W, C) → logits (B, num_classes).

    Plain head: Dense(20) → Dense(num_classes). Residual: a 1×1-conv projection ("proj") of the input image
    is added before the last ReLU, and the head is a single Dense(num_classes).
    """

    num_classes: int
    channels: int = 8
    depth: int = 1
    residual: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = x
        for i in range(self.depth):
            h = nn.Conv(self.channels, (3, 3), padding="SAME", name=f"conv_{i}")(h)
            if self.residual and i == self.depth - 1:
                h = h + nn.Conv(self.channels, (1, 1), name="proj")(x)
            h = nn.relu(h)
        h = nn.max_pool(h, (2, 2), strides=(2, 2), padding="VALID")
        h = h.reshape(h.shape[0], -1)
        if not self.residual:
            h = nn.Dense(20, name="hidden")(h)
        return nn.Dense(self.num_classes, name="head")(h)


def mlp_name(hidden: tuple[int, ...], activation: str = "relu") -> str:
    """"mlp-32x32", "mlp-linear", "mlp-50-tanh" (the activation named unless ReLU)."""
    return "mlp-" + ("x".join(map(str, hidden)) or "linear") + ("" if activation == "relu" else f"-{activation}")


class MLP(nn.Module):
    """Flatten → [Dense(h) → activation] for h in hidden → Dense(num_classes); x (B, ...) → logits (B, num_classes)."""

    num_classes: int
    hidden: tuple[int, ...] = (20,)
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = x.reshape(x.shape[0], -1)
        act = getattr(nn, self.activation)
        for i, width in enumerate(self.hidden):
            h = act(nn.Dense(width, name=f"dense_{i}")(h))
        return nn.Dense(self.num_classes, name="head")(h)


class RegressionMLP(nn.Module):
    """[Dense(h) → activation] for h in hidden → Dense(2) ("head"); x (B, d) → (loc (B,), scale (B,)) (`loc_scale`).

    homoscedastic: the head is Dense(1) (the loc) and one parameter "log_noise" (initialised at 0) is every point's
    raw log-scale: a homoscedastic Gaussian likelihood with a learned noise scale."""

    hidden: tuple[int, ...] = (16, 16)
    activation: str = "relu"
    homoscedastic: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = x.reshape(x.shape[0], -1)
        act = getattr(nn, self.activation)
        for i, width in enumerate(self.hidden):
            h = act(nn.Dense(width, name=f"dense_{i}")(h))
        if not self.homoscedastic:
            return loc_scale(nn.Dense(2, name="head")(h))
        loc = nn.Dense(1, name="head")(h)
        log_noise = self.param("log_noise", nn.initializers.zeros, (1,))
        return loc_scale(jnp.concatenate([loc, jnp.broadcast_to(log_noise, loc.shape)], axis=1))



class FilterResponseNorm(nn.Module):
    """FRN + TLU (Singh & Krishnan, 2020): x / sqrt(mean_HW(x²) + eps), then max(γx + β, τ); per channel."""

    eps: float = 1e-6

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        gamma = self.param("scale", nn.initializers.ones, (c,))
        beta = self.param("bias", nn.initializers.zeros, (c,))
        tau = self.param("tau", nn.initializers.zeros, (c,))
        nu2 = jnp.mean(jnp.square(x), axis=(-3, -2), keepdims=True)
        x = x * jax.lax.rsqrt(nu2 + self.eps)
        return jnp.maximum(gamma * x + beta, tau)


class ResNetFRN(nn.Module):
    """ResNet-(6n+2) for 32×32 images (He et al. 2016 CIFAR variant) with FRN/TLU instead of batch norm and
    Swish activations, as the HMC reference of Izmailov et al. (2021): stem conv 16 → 3 stages (16, 32, 64
    filters) of n basic blocks, stride 2 at the first block of stages 2 and 3 with a 1×1 conv (+FRN) shortcut
    → global average pool → Dense(num_classes). depth 20 → n = 3 (≈ 0.27 M parameters for 10 classes)."""

    num_classes: int
    depth: int = 20
    width: int = 16

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if (self.depth - 2) % 6:
            raise ValueError(f"ResNetFRN depth must be 6n+2, got {self.depth}")
        n = (self.depth - 2) // 6
        act = nn.swish

        def layer(h, filters, kernel=3, strides=1, activation=True):
            h = nn.Conv(filters, (kernel, kernel), strides=(strides, strides), padding="SAME")(h)
            h = FilterResponseNorm()(h)
            return act(h) if activation else h

        filters = self.width
        h = layer(x, filters)
        for stage in range(3):
            for block in range(n):
                strides = 2 if stage > 0 and block == 0 else 1
                y = layer(h, filters, strides=strides)
                y = layer(y, filters, activation=False)
                if stage > 0 and block == 0:
                    h = layer(h, filters, kernel=1, strides=strides, activation=False)
                h = act(h + y)
            filters *= 2
        h = jnp.mean(h, axis=(1, 2))
        return nn.Dense(self.num_classes, name="head")(h)


def build_model(spec: ModelSpec, num_classes: int, input_shape: tuple[int, ...] | None = None) -> nn.Module:
    """The flax module described by `spec` with `num_classes` outputs (kind "flax": the user's factory called
    with `input_shape`, its output shape checked; tasks.user_model)."""
    if spec.kind == "flax":
        from tasks.user_model import build_user_model

        return build_user_model(spec.factory, input_shape, num_classes)
    if spec.kind == "mlp":
        return MLP(num_classes, spec.hidden, spec.activation)
    if spec.kind == "fmnist_1conv":  # the paper's Fashion-MNIST evaluation net (docs/evaluation.md, The paper's protocol)
        return CNN(num_classes, channels=32, depth=1, residual=False)
    if spec.kind == "resnet20_frn":
        return ResNetFRN(num_classes, depth=20)
    return CNN(num_classes, spec.channels, spec.depth, spec.residual)
