"""Flax classifiers of the task family: small CNNs (plain or residual) and MLPs, all returning logits (B, C)."""
from __future__ import annotations

from dataclasses import dataclass

import flax.linen as nn
import jax


@dataclass(frozen=True)
class ModelSpec:
    """Architecture. kind "cnn" uses channels/depth/residual; kind "mlp" uses hidden (widths of hidden layers)."""

    kind: str = "cnn"
    channels: int = 8
    depth: int = 1
    residual: bool = False
    hidden: tuple[int, ...] = (20,)

    def __post_init__(self):
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if self.kind not in ("cnn", "mlp"):
            raise ValueError(f"ModelSpec.kind must be 'cnn' or 'mlp', got {self.kind!r}")
        if self.channels < 1 or self.depth < 1 or any(h < 1 for h in self.hidden):
            raise ValueError(
                f"ModelSpec sizes must be positive: channels={self.channels}, depth={self.depth}, hidden={self.hidden}"
            )

    @property
    def name(self) -> str:
        """E.g. "cnn-c8-d2", "cnn-c8-d2-res", "mlp-32x32", "mlp-linear"."""
        if self.kind == "mlp":
            return "mlp-" + ("x".join(map(str, self.hidden)) or "linear")
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


class MLP(nn.Module):
    """Flatten → [Dense(h) → ReLU] for h in hidden → Dense(num_classes); x (B, ...) → logits (B, num_classes)."""

    num_classes: int
    hidden: tuple[int, ...] = (20,)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = x.reshape(x.shape[0], -1)
        for i, width in enumerate(self.hidden):
            h = nn.relu(nn.Dense(width, name=f"dense_{i}")(h))
        return nn.Dense(self.num_classes, name="head")(h)


def build_model(spec: ModelSpec, num_classes: int) -> nn.Module:
    """The flax module described by `spec` with `num_classes` outputs."""
    if spec.kind == "mlp":
        return MLP(num_classes, spec.hidden)
    return CNN(num_classes, spec.channels, spec.depth, spec.residual)
