"""The user's own flax model (`--model pkg.module:Factory`): Factory(input_shape, num_outputs) returns a flax
module mapping x (B, *input_shape) to (B, num_outputs).  Classification: num_outputs = classes (logits);
regression: num_outputs = 2, read as (location, raw log-scale) (`RegressionHead`).  The factory is imported
from PYTHONPATH (the working directory included under `python -m`) and its output shape is checked once, with
abstract shapes (jax.eval_shape), when the task is built: before any run starts."""
from __future__ import annotations

import contextlib
import importlib
import io
import math
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp

from base.io import one_line
from tasks.likelihoods.gaussian import loc_scale
from tasks.limits import check_parameter_count


class UserModelError(ValueError):
    """A --model that cannot be imported, called, or gives outputs of the wrong shape; one line."""


class RegressionHead(nn.Module):
    """The user's module `net` with 2 outputs → (loc (B,), scale (B,)) as tasks.models.RegressionMLP."""

    net: nn.Module

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return loc_scale(self.net(x))


def _import_quietly(path: str, module_name: str):
    """Import the user's module with sys.argv reduced to its name (a module that parses the command line at import
    must not see ours) and its stdout / stderr held back; a module that raises or exits (sys.exit, argparse's usage
    error) while importing is one UserModelError line, its own output dropped."""
    held, argv = io.StringIO(), sys.argv
    sys.argv = [module_name]
    try:
        with contextlib.redirect_stdout(held), contextlib.redirect_stderr(held):
            module = importlib.import_module(module_name)
    except ImportError as e:
        raise UserModelError(f"--model {path}: cannot import {module_name!r} ({one_line(e)}); is it on "
                             "PYTHONPATH?") from None
    except SystemExit as e:
        lines = [ln.strip() for ln in held.getvalue().splitlines() if ln.strip()]
        said = f"; its last output line: {lines[-1][:200]!r}" if lines else ""
        raise UserModelError(f"--model {path}: importing {module_name!r} ended the process (SystemExit "
                             f"{e.code!r}{said}); a model module must not exit when imported") from None
    except Exception as e:  # the user's module raised while importing
        raise UserModelError(f"--model {path}: importing {module_name!r} failed ({type(e).__name__}: "
                             f"{one_line(e)})") from None
    finally:
        sys.argv = argv
    if held.getvalue():
        sys.stdout.write(held.getvalue())  # what an import printed, after it succeeded
    return module


def load_factory(path: str):
    """The callable `pkg.module:Factory` names."""
    module_name, colon, attr = path.partition(":")
    if not colon or not module_name or not attr:
        raise UserModelError(f"--model {path!r}: expected pkg.module:Factory")
    module = _import_quietly(path, module_name)
    factory = getattr(module, attr, None)
    if factory is None:
        raise UserModelError(f"--model {path}: module {module_name!r} has no attribute {attr!r}")
    if not callable(factory):
        raise UserModelError(f"--model {path}: {attr!r} is not callable")
    return factory


def build_user_model(path: str, input_shape: tuple[int, ...] | None, num_outputs: int,
                     regression: bool = False) -> nn.Module:
    """Factory(input_shape, num_outputs) (num_outputs 2 for regression, wrapped in `RegressionHead`), its output
    shape (B, num_outputs) checked on a batch of 2 zero inputs."""
    if input_shape is None:
        raise UserModelError(f"--model {path}: the task's input shape is needed to build it")
    outputs = 2 if regression else num_outputs
    try:
        module = load_factory(path)(tuple(input_shape), outputs)
    except UserModelError:
        raise
    except Exception as e:
        raise UserModelError(f"--model {path}: Factory{(tuple(input_shape), outputs)} raised "
                             f"{type(e).__name__}: {e}") from None
    if not isinstance(module, nn.Module):
        raise UserModelError(f"--model {path}: returned {type(module).__name__}, not a flax.linen Module")
    x = jnp.zeros((2, *input_shape), jnp.float32)
    try:
        variables = jax.eval_shape(module.init, jax.random.PRNGKey(0), x)
        out = jax.eval_shape(module.apply, variables, x)
    except Exception as e:
        raise UserModelError(f"--model {path}: fails on inputs of shape {(2, *input_shape)} "
                             f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})") from None
    if set(variables) != {"params"}:
        raise UserModelError(f"--model {path}: has variable collections {sorted(variables)}; only 'params' is "
                             "supported (no batch statistics)")
    if getattr(out, "shape", None) != (2, outputs):
        raise UserModelError(f"--model {path}: outputs {getattr(out, 'shape', type(out).__name__)} for a batch of 2, "
                             f"expected (2, {outputs})" + (" (location, raw log-scale)" if regression else ""))
    if not jnp.issubdtype(out.dtype, jnp.floating):
        raise UserModelError(f"--model {path}: outputs of dtype {out.dtype}; expected floating-point "
                             + ("(location, raw log-scale)" if regression else "logits"))
    leaves = jax.tree.leaves(variables)
    if any(not jnp.issubdtype(v.dtype, jnp.floating) for v in leaves):
        raise UserModelError(f"--model {path}: has non-floating-point parameters; a sampler moves every parameter")
    check_parameter_count(sum(math.prod(v.shape) for v in leaves), f"--model {path}")
    return RegressionHead(module) if regression else module
