"""Shared types of every sampler: the posterior a sampler targets and the blackjax-style interfaces.

Conventions: a sampler's state is a NamedTuple with a `position` field (the parameter pytree θ); a step
returns `(state, info)`, info a NamedTuple with at least `loss` (mean minibatch NLL, nats per example, f32 scalar;
at the pre-update position unless the sampler's Info says otherwise) and `is_finite` (bool scalar: the new state is
finite); momentum methods add `kinetic` = Σ_i r'_i·∇_rK(θ, r')_i at the post-update momentum r' (f32 scalar, nats;
its mean ÷ d is the kinetic temperature, docs/sampling.md § Measuring it: kinetic and configurational temperature).
SMILE's isokinetic velocity has no such term (l2e/smile.py).
"""
from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

PyTree = Any
Minibatch = Any


def _is_plain(value) -> bool:
    """A number, string or array: what a pytree operation never puts in a Posterior's function fields (it may put
    other placeholders there, which pass)."""
    import numpy as np

    return isinstance(value, (int, float, complex, str, bytes, np.ndarray, np.generic, jax.Array))


class _PosteriorFields(NamedTuple):
    nll: Callable[[PyTree, Minibatch], jax.Array]
    log_prior: Callable[[PyTree], jax.Array]
    data_size: int


class Posterior(_PosteriorFields):
    """Unnormalised posterior of a model, in the units samplers need.

    nll: (params, minibatch) -> scalar, the **mean** negative log-likelihood over the minibatch.
    log_prior: params -> scalar, log p(θ) up to a constant.
    data_size: N, the true number of training examples (the likelihood is N × mean NLL): a concrete N (a Python,
      numpy or JAX number) must be a positive finite number, else ValueError when the Posterior is built; nll and
      log_prior must be callable (a traced N, inside a transformation, passes).
    """

    __slots__ = ()

    def __new__(cls, nll, log_prior, data_size):
        from l2e.checks import check_positive

        for name, fn in (("nll", nll), ("log_prior", log_prior)):
            if not callable(fn) and _is_plain(fn):
                raise ValueError(f"Posterior.{name} must be a callable, got {type(fn).__name__}")
        check_positive(**{"Posterior.data_size": data_size})
        return super().__new__(cls, nll, log_prior, data_size)

    def value_and_potential_grad(self, params: PyTree, minibatch: Minibatch) -> tuple[jax.Array, PyTree, PyTree]:
        """The loss and the two gradients a step needs.

        Args:
          params: θ (pytree).
          minibatch: whatever `nll` takes.
        Returns:
          (loss, ḡ, ∇Ũ): the mean minibatch NLL (scalar, nats per example), its gradient ḡ (per-datum units) and
          the stochastic potential gradient ∇Ũ = N·ḡ − ∇log p(θ) (nats per θ unit), both pytrees like θ.
        """
        loss, g = jax.value_and_grad(self.nll)(params, minibatch)
        gp = jax.grad(self.log_prior)(params)
        grad_u = jax.tree.map(lambda a, b: self.data_size * a - b, g, gp)
        return loss, g, grad_u

    def potential_grad(self, params: PyTree, minibatch: Minibatch) -> tuple[PyTree, PyTree]:
        """`value_and_potential_grad` without the loss.

        Args:
          params: θ (pytree).
          minibatch: whatever `nll` takes.
        Returns:
          (ḡ, ∇Ũ), pytrees like θ.
        """
        _, g, grad_u = self.value_and_potential_grad(params, minibatch)
        return g, grad_u


class SamplingAlgorithm(NamedTuple):
    """A minibatch sampler: `init(position) -> state`, `step(key, state, minibatch) -> (state, info)`;
    both pure and jittable."""

    init: Callable[[PyTree], Any]
    step: Callable[[jax.Array, Any, Minibatch], tuple[Any, Any]]


class FullBatchAlgorithm(NamedTuple):
    """A full-batch sampler (MCLMC, NUTS): `init(position, key) -> state`, `step(key, state) -> (state, info)`;
    both pure and jittable. The log density is fixed when the algorithm is built; the sampler's module has
    `init(position, logdensity_fn, key)` and `build_kernel(logdensity_fn, …)` as the minibatch samplers have
    `init(position)` and `build_kernel(posterior, …)`."""

    init: Callable[[PyTree, jax.Array], Any]
    step: Callable[[jax.Array, Any], tuple[Any, Any]]


def normal_like(key: jax.Array, tree: PyTree) -> PyTree:
    """Independent N(0, 1) draws with the structure, shapes and dtypes of `tree`.

    One draw of the total size, split into leaves: a single RNG call compiles and runs much faster
    on XLA:CPU than one call per leaf.

    Args:
      key: PRNG key.
      tree: a pytree of float arrays (the first leaf's dtype is drawn, each leaf cast to its own).
    Returns:
      a pytree like `tree`.
    """
    leaves, treedef = jax.tree.flatten(tree)
    sizes = [x.size for x in leaves]
    flat = jax.random.normal(key, (sum(sizes),), leaves[0].dtype)
    out, start = [], 0
    for x, n in zip(leaves, sizes):
        out.append(flat[start:start + n].reshape(x.shape).astype(x.dtype))
        start += n
    return jax.tree.unflatten(treedef, out)


def _flat(tree: PyTree) -> jax.Array:
    """Every coordinate of every leaf in one (d,) vector (jax.tree order); XLA fuses it into a reduction."""
    leaves = jax.tree.leaves(tree)
    return leaves[0].reshape(-1) if len(leaves) == 1 else jnp.concatenate([x.reshape(-1) for x in leaves])


def tree_sum(tree: PyTree) -> jax.Array:
    """Σ of every coordinate of every leaf.

    Args:
      tree: a pytree of arrays.
    Returns:
      a scalar.
    """
    return jnp.sum(_flat(tree))


def tree_vdot(a: PyTree, b: PyTree) -> jax.Array:
    """Σ_i a_i·b_i over every coordinate of two pytrees of the same structure.

    Args:
      a: a pytree of arrays.
      b: a pytree like `a`.
    Returns:
      a scalar.
    """
    return jnp.sum(_flat(a) * _flat(b))


def tree_size(tree: PyTree) -> int:
    """The number of coordinates d of a pytree.

    Args:
      tree: a pytree of arrays.
    Returns:
      d, a Python int.
    """
    return sum(x.size for x in jax.tree.leaves(tree))


def settled(tree: PyTree) -> PyTree:
    """`tree` through an optimisation barrier: diagnostics (Info sums) computed from a step's finished
    outputs this way stay out of the update's fusions, so adding them leaves the state bit-identical.

    Args:
      tree: a pytree of arrays.
    Returns:
      the same values.
    """
    return jax.lax.optimization_barrier(tree)


def all_finite(*scalars: jax.Array) -> jax.Array:
    """Whether every one of `scalars` is finite (cheap finiteness flag of a step's outputs).

    Args:
      *scalars: scalar arrays.
    Returns:
      a bool scalar.
    """
    return functools.reduce(operator.and_, [jnp.isfinite(s) for s in scalars])


def kinetic_temperature(momentum: PyTree, inv_mass: PyTree, friction: PyTree, eps) -> tuple[jax.Array, jax.Array]:
    """One chain's kinetic temperature after an SGHMC update with a diagonal mass, and its kinetic sum.

    The friction's Euler step r ← r − ε·γᵢ·r + … holds the momentum at T/(1 − ε·γᵢ/2) while θ is sampled at T
    (docs/sampling.md, "Measuring it"), so the raw Σ r·M⁻¹r / d of a correct chain reads up to 2·T where ε·γᵢ → 1
    (Transient-L2E raises γᵢ to absorb minibatch noise); t_kin divides that out: T for a correct chain at equilibrium.
    Both sums are dot products leaf by leaf (under jax.vmap over chains, batched dots; a friction shared by the
    chains, a matrix-vector product): on XLA:CPU a sum over θ's axes is a reduction, the slower of the two.

    Args:
      momentum: r' after the update (a pytree).
      inv_mass: M⁻¹, like `momentum`.
      friction: γᵢ, each coordinate's damping per unit step (r ← r − ε·γᵢ·r + …), like `momentum`.
      eps: ε, the step.
    Returns:
      (t_kin: (Σᵢ r'ᵢ²·M⁻¹ᵢ − ½·ε·Σᵢ γᵢ·r'ᵢ²·M⁻¹ᵢ) / d; kinetic: Σᵢ r'ᵢ²·M⁻¹ᵢ).
    """
    kinetic, damped = 0.0, 0.0
    for r, m, f in zip(*(jax.tree.leaves(t) for t in (momentum, inv_mass, friction))):
        rf, rm = r.reshape(-1), (r * m).reshape(-1)
        kinetic = kinetic + jnp.dot(rf, rm)
        damped = damped + jnp.dot(rf * rm, jnp.broadcast_to(f, r.shape).reshape(-1))
    return (kinetic - 0.5 * eps * damped) / tree_size(momentum), kinetic


def window_temperature(momentum: PyTree, inv_mass: PyTree, friction: PyTree, eps, step, freeze_step
                       ) -> tuple[jax.Array, jax.Array]:
    """The kinetic-temperature fields of the Info of a single-chain sampler whose window is SGHMC with a diagonal mass
    (Mass-L2E, Transient-L2E), read by `l2e.check_temperature`: (t_kin, `kinetic_temperature`'s, whose mean over the
    window is T_kin; sampling: step ≥ freeze_step, `step` the update's counter before it). For one chain the sum is
    one fused reduction, Σᵢ (1 − ε·γᵢ/2)·r'ᵢ²·M⁻¹ᵢ / d (the dot form, for batched chains, writes its operands out)."""
    r, m, f = settled((momentum, inv_mass, friction))
    terms = jax.tree.map(lambda ri, mi, fi: jnp.sum((1.0 - eps * fi / 2.0) * ri * ri * mi), r, m, f)
    return sum(jax.tree.leaves(terms)) / tree_size(momentum), step >= freeze_step


class SamplerAPI:
    """A sampler's factory that also exposes the sampler's module (as blackjax's top-level samplers do):
    `l2e.sghmc(posterior, lr, friction)` calls the factory; `l2e.sghmc.init`, `l2e.sghmc.build_kernel` are
    the sampler's, and any other attribute is looked up in its module (`l2e.sghmc.SGHMCState`)."""

    def __init__(self, factory: Callable, init: Callable, build_kernel: Callable, module):
        """Args:
          factory: hyperparameters -> SamplingAlgorithm (or FullBatchAlgorithm; `l2e.mile`: the recipe's run).
          init: the module's state constructor.
          build_kernel: the module's kernel builder.
          module: the sampler's module (other attributes are looked up there).
        """
        functools.update_wrapper(self, factory)
        self.factory, self.init, self.build_kernel, self.module = factory, init, build_kernel, module

    def __call__(self, *args, **kwargs):
        return self.factory(*args, **kwargs)

    def __getattr__(self, name: str):
        if name == "module":  # not yet set (during unpickling / copying)
            raise AttributeError(name)
        return getattr(self.module, name)

    def __repr__(self) -> str:
        return f"<sampler {self.module.__name__}.{self.factory.__name__}>"


class Shipped(NamedTuple):
    """A meta-trained checkpoint shipped with the package: `name` (what `l2e.load_sampler(name)` takes; its folder
    under the `checkpoints` package is the name with "-" → "_") and `method`, the evaluation method that runs it by
    name (None: it has no method of its own and runs through the learned method's `--sampler`)."""

    name: str
    method: str | None = None


META_STARTS = ("sghmc", "random")
"""Meta-parameter starts every learned sampler offers (`LearnedSampler.init_meta_params`): "sghmc" — the
meta-parameters at which the step is its hand-designed counterpart (SGHMC); "random" — every layer random."""


@dataclasses.dataclass(frozen=True)
class Protocol:
    """How a learned sampler is run: the capabilities it declares, which the evaluation, the card, the benches and
    meta-training read instead of guessing from its config's field names (one group, so that a new capability is a
    field here, not another field of every registry row).

    Attributes:
      tuning_free: one configuration on every task — the config has no learning rate and the kernel's
        learning_rate is a dimensionless multiplier (the evaluation's grid is the one multiplier 1); False: the
        config's learning_rate (ε²·N) is tuned, replaced by each grid value.
      window: (config, start) -> config with whatever the sampler freezes before sampling frozen at update `start`
        (the first update of the sampling window); None: the sampler freezes nothing.
      window_fraction: config -> the share of a chain of G updates the sampler declares as its sampling window (its
        K states evenly over the last share, a protocol choice the kernel does not read), or None for the
        protocol's default (the last half); None: it declares none.
      phases: the names of its phase kernels (build_kernel(…, phase=name)), in chain order; () for one kernel.
      phase_of: (config, start, length) -> the phase that updates start … start + length − 1 may run with (one of
        `phases`, or None for the general kernel), so that a chunk compiles without per-update branches (the same
        numbers); None: the sampler has one kernel (`l2e.chains.run_chain`'s chunk_at).
      splits_minibatch: config -> whether the kernel splits each minibatch in halves (a minibatch-noise estimate,
        as Transient-L2E's with noise_halves); None: it never does. The sampler card gives such a sampler each
        noise draw as two half-batch rows whose mean is the draw (evaluate.card.half_batches).
    """

    tuning_free: bool = False
    window: Callable[[Any, int], Any] | None = None
    window_fraction: Callable[[Any], float | None] | None = None
    phases: tuple[str, ...] = ()
    phase_of: Callable[[Any, int, int], str | None] | None = None
    splits_minibatch: Callable[[Any], bool] | None = None


@dataclasses.dataclass(frozen=True)
class LearnedSampler:
    """Everything the rest of the project needs to know about one learned sampler: one row of `l2e.learned.REGISTRY`.

    Checkpoint reading and writing, meta-training (config group, estimators, φ₀), evaluation (methods, checkpoint
    selection, the sampler card) and the benches read these fields and nothing else of the sampler's module.

    Attributes:
      name: the registry key; the `sampler_kind` a checkpoint's metadata records and meta_train's `sampler_kind`.
      title: the name in tables ("Mass-L2E").
      config: the frozen hyperparameter dataclass (its fields include learning_rate = ε²·N in mean-loss units,
        friction C and temperature T).
      config_group: the meta-training config field that holds `config` (`--set <config_group>.<field>=…`).
      init: position pytree -> the sampler's state (momentum 0, statistics empty).
      build_kernel: (posterior, config) -> kernel(key, state, minibatch, meta_params, learning_rate=…, …) ->
        (state, info); meta_params and learning_rate are traced call arguments, the rest of `config` static.
      factory: (posterior, meta_params, config) -> SamplingAlgorithm, a ready drop-in step.
      features: names of the meta-model's input features; a dict head -> names for a multi-head meta-model.
      outputs: output width of the meta-model (of each head).
      init_meta_params: (key, hidden widths, start) -> φ; start in META_STARTS ("sghmc": the step equals
        `counterpart` exactly; "random").
      counterpart: the hand-designed sampler the "sghmc" start reproduces.
      lrs: the evaluation's default learning-rate grid (lr = ε²·N) for this sampler.
      shipped: the checkpoints of this kind shipped with the package (`Shipped`), the first one the kind's own.
      check: (restored tree, where) -> tree of float32 numpy leaves, ValueError naming `where` otherwise — for a
        meta-parameter tree that is not one Dense stack per head (None: `features` / `outputs` describe the stacks).
      samples: a sampler at its temperature for every φ (correct by construction), so its kinetic temperature is a
        stationarity check (evaluate's Method.kinetic_check); False for the paper-form step, which is not.
      protocol: how it is run (`Protocol`: tuning-free or not, its sampling window and freeze rule, its phase
        kernels); `window` and `phase_of` read through to it.
    """

    name: str
    title: str
    config: type
    config_group: str
    init: Callable[[PyTree], Any]
    build_kernel: Callable
    factory: Callable[..., SamplingAlgorithm]
    features: tuple[str, ...] | dict[str, tuple[str, ...]]
    outputs: int
    init_meta_params: Callable[[jax.Array, tuple[int, ...], str], PyTree]
    counterpart: str = "sghmc"
    lrs: tuple[float, ...] = (0.01, 0.03, 0.1)
    shipped: tuple[Shipped, ...] = ()
    check: Callable[[Any, str], PyTree] | None = None
    samples: bool = True
    protocol: Protocol = Protocol()

    @property
    def window(self) -> Callable[[Any, int], Any] | None:
        """Protocol.window."""
        return self.protocol.window

    @property
    def phase_of(self) -> Callable[[Any, int, int], str | None] | None:
        """Protocol.phase_of."""
        return self.protocol.phase_of

    @property
    def tuning_free(self) -> bool:
        """Protocol.tuning_free."""
        return self.protocol.tuning_free

    def window_fraction(self, config) -> float | None:
        """The sampling window `config` declares (Protocol.window_fraction), None for the protocol's last half."""
        return None if self.protocol.window_fraction is None else self.protocol.window_fraction(config)

    def splits_minibatch(self, config) -> bool:
        """Whether `config`'s kernel splits each minibatch in halves (Protocol.splits_minibatch)."""
        return self.protocol.splits_minibatch is not None and bool(self.protocol.splits_minibatch(config))

    @property
    def heads(self) -> dict[str, int] | None:
        """{head: input width} of a multi-head meta-model, None for a single Dense stack."""
        if isinstance(self.features, dict):
            return {head: len(names) for head, names in self.features.items()}
        return None

    @property
    def inputs(self) -> int:
        """Input width of the meta-model (a single Dense stack; for heads see `heads`)."""
        if isinstance(self.features, dict):
            raise AttributeError(f"{self.name}: a multi-head meta-model has one input width per head (heads)")
        return len(self.features)

    def kernel(self, posterior, config, phase: str | None = None):
        """build_kernel(posterior, config) — with `phase`, the kernel of that phase (a sampler with `phase_of`)."""
        if phase is None:
            return self.build_kernel(posterior, config)
        return self.build_kernel(posterior, config, phase=phase)

    def sampling_config(self, config, start: int):
        """The sampling-window rule applied for a window starting at update `start`.

        Args:
          config: an instance of `self.config`.
          start: the window's first update (clamped to ≥ 1).
        Returns:
          `config` with whatever the sampler freezes set to freeze at `start` (unchanged when `window` is None).
        """
        return config if self.window is None else self.window(config, max(1, int(start)))
