"""The sampler card: every minibatch sampler on known targets with minibatch-style gradient noise.

Targets (docs/evaluation.md, "The sampler card"): a 10-D isotropic Gaussian (σ = 1), a 100-D anisotropic Gaussian (σ log-spaced
0.1 … 10) and a 2-D two-mode mixture (½N(−m, s²I) + ½N(m, s²I)).  Gradient noise: the sampler sees
∇Ũ(θ) = ∇U(θ) + ξ, ξ ~ N(0, diag(ν²/σ²)) drawn per step (the "minibatch"), i.e. noise of relative size ν in the
units of each coordinate's gradient; ν = 0 gives exact gradients.  The targets are written as a
`l2e.Posterior` with data size N: nll(θ, ξ) = (U(θ) + θ·ξ)/N and a flat prior, so N·∇nll = ∇U + ξ.

Every momentum sampler runs at the same physical step ε and friction C (SGHMC form: lr = ε²N); SGLD at the
Langevin step h = ε·σ_min, pSGLD at lr = ε (its RMSprop preconditioner G ≈ N·σ_min for gradients of scale
1/σ_min makes its step G·lr/N ≈ h); cyclical SGHMC (SGD-with-momentum form) at lr₀ = ε²N, a = Cε, statistics over
its sampling phases only.  Per target and sampler, after burn-in, over all chains:
- mean error / σ: mean over coordinates of |E[θ_i] − μ_i| / σ_i;
- variance ratio Var[θ_i] / σ_i²: median and 5–95 % range over coordinates;
- T_kin = ⟨Σ r·∇_rK⟩ / d from the step's info (momentum samplers; docs/sampling.md, "Measuring it");
- T_conf = ⟨θ·∇U(θ)⟩ / d with the exact ∇U (equals T for any correct sampler, by integration by parts;
  `l2e.diagnostics.virial`).
SGHMC is run with several seeds; the range of its median variance ratio is the yardstick band.

Modules: targets (the targets, CardConfig, the noisy posterior), run (builders, `run_sampler`, `sampler_card`),
report (card.md, card.png), analytic (SMILE's analytic benchmark), cli (`python -m evaluate card`).
"""
from evaluate.card.report import card_markdown, plot_card
from evaluate.card.run import SamplerBuilder, always, hand_designed, learned_builder, run_sampler, sampler_card
from evaluate.card.targets import (CardConfig, Target, banana_target, batch_noise, builder_noise, card_posterior,
                                   default_targets, gaussian_target, half_batches, mixture_target)

__all__ = ["CardConfig", "SamplerBuilder", "Target", "always", "banana_target", "batch_noise", "builder_noise",
           "card_markdown", "card_posterior", "default_targets", "gaussian_target", "half_batches", "hand_designed",
           "learned_builder", "mixture_target", "plot_card", "run_sampler", "sampler_card"]
