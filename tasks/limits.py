"""Resource limits of tasks, checked before anything is allocated: the size of a model (layer widths and depth, then
its parameter count, computed from shapes alone), the number of classes a label can imply, and the size of the
user's data files and task lists. `HELP` states them for the CLIs' --help."""
from __future__ import annotations

import math

__all__ = ["HELP", "MAX_CLASSES", "MAX_DATA_BYTES", "MAX_LAYERS", "MAX_PARAMETERS", "MAX_TASK_LIST_BYTES", "MAX_WIDTH",
           "ModelSizeError", "check_parameter_count", "model_parameter_count"]

MAX_PARAMETERS = 5 * 10**7
"""Parameters of one network (ResNet-20-FRN has 0.27 M): 200 MB per float32 copy, and a run keeps many copies."""
MAX_WIDTH = 10**6
"""Width of one layer (MLP hidden units, CNN channels)."""
MAX_LAYERS = 256
"""Hidden layers of an MLP, convolutions of a CNN."""
MAX_CLASSES = 10**5
"""Classes of a classification task (the output layer's width)."""
MAX_DATA_BYTES = 4 * 2**30
"""The user's npz (its arrays, uncompressed) or csv file: 4 GiB."""
MAX_TASK_LIST_BYTES = 2**20
"""A meta-training task list file (`--set tasks=@FILE`): 1 MiB."""

HELP = (f"task limits: at most {MAX_PARAMETERS:.0e} parameters per network, layers of {MAX_WIDTH:.0e} units, "
        f"{MAX_LAYERS} layers, {MAX_CLASSES:.0e} classes; npz / csv data at most {MAX_DATA_BYTES // 2**30} GiB, task "
        f"list files at most {MAX_TASK_LIST_BYTES // 2**20} MiB")


class ModelSizeError(ValueError):
    """A network above the resource limits (one line)."""


def _dense(inputs: int, outputs: int) -> int:
    return inputs * outputs + outputs


def _mlp_count(spec, input_shape: tuple[int, ...], outputs: int) -> int:
    widths = (math.prod(input_shape), *spec.hidden, outputs)
    return sum(_dense(a, b) for a, b in zip(widths[:-1], widths[1:]))


def _cnn_count(spec, input_shape: tuple[int, ...], outputs: int) -> int | None:
    if len(input_shape) != 3:
        return None  # not images: the task reports that itself
    h, w, c = input_shape
    channels, depth, residual = ((32, 1, False) if spec.kind == "fmnist_1conv"
                                 else (spec.channels, spec.depth, spec.residual))
    count = 9 * c * channels + channels + (depth - 1) * (9 * channels * channels + channels)
    count += (c * channels + channels) if residual else 0
    flat = (h // 2) * (w // 2) * channels
    return count + (_dense(flat, outputs) if residual else _dense(flat, 20) + _dense(20, outputs))


def model_parameter_count(spec, input_shape: tuple[int, ...], outputs: int) -> int | None:
    """The parameter count of a built-in network, from shapes alone (no allocation).

    Args:
      spec: a tasks.models.ModelSpec (kinds mlp, cnn, fmnist_1conv; others: None).
      input_shape: one example's shape.
      outputs: the output layer's width (classes; 2 for the regression head).
    Returns:
      the number of parameters, or None for a kind counted elsewhere (resnet20_frn: fixed widths; flax: the user's
      model, counted by tasks.user_model).
    """
    if spec.kind == "mlp":
        return _mlp_count(spec, tuple(input_shape), outputs)
    if spec.kind in ("cnn", "fmnist_1conv"):
        return _cnn_count(spec, tuple(input_shape), outputs)
    return None


def check_parameter_count(count: int | None, what: str) -> None:
    """Refuse a network with more than MAX_PARAMETERS parameters.

    Args:
      count: its parameter count (None: not known; passes).
      what: the task or model, for the message.
    Returns:
      None.
    Raises:
      ModelSizeError: above the limit.
    """
    if count is not None and count > MAX_PARAMETERS:
        raise ModelSizeError(f"{what}: the network has {count:.3g} parameters, more than the limit of "
                             f"{MAX_PARAMETERS:.0e} (a resource limit); choose a smaller model")
