"""The named meta-training configurations (`python -m meta_train --preset NAME`)."""
from __future__ import annotations

from l2e.chains import ChainSchedule
from l2e.kinetic import KineticConfig
from l2e.l2e import L2EConfig
from l2e.mass import MassConfig
from l2e.meta_sgmcmc import MetaSGMCMCConfig
from l2e.transient import TransientConfig
from meta_train.config import ESConfig, MetaTrainConfig, ObjectiveConfig
from tasks.distribution import TaskDistribution

DEFAULT_TASKS = TaskDistribution(datasets=("digits", "synthetic_images"), channels=(4, 8), depths=(1, 2),
                                 residual=(False, True))
"""The default preset's task distribution (16 CNN tasks), shared by the published-sampler presets."""

META_SGMCMC_SAMPLER = MetaSGMCMCConfig(learning_rate=0.1, friction=10.0, temperature=1.0, q_clip=5.0, d_max=100.0)
"""Meta-SGMCMC (l2e.meta_sgmcmc) as the L2E authors re-ran it (clips 5 for Q, 100 for D; docs/meta_training.md
§ Meta-SGMCMC as the L2E authors trained it) at SGHMC's
step and friction of the evaluation grids (lr = ε²N 0.1, C 10; their step size 1e-6 would not move these chains)."""

MIXED_TASKS = (
    "digits/cnn-c4-d1", "digits/cnn-c8-d2-res", "synthetic_images/cnn-c4-d2", "synthetic_images/cnn-c8-d1-res",
    "digits/mlp-32:weight=2", "wine/mlp-16x16:weight=2",
    "uci:yacht/mlp-50", "uci:energy/mlp-50", "uci:concrete/mlp-50", "uci:kin8nm/mlp-50",
)
"""The task strings of the `mixed` preset (weights: each family a third of the draws)."""

PRESETS: dict[str, MetaTrainConfig] = {
    # under a minute end to end: one small task, a short chain, a few outer steps
    "smoke": MetaTrainConfig(
        num_outer=4, meta_loss_examples=128, checkpoint_every=2,
        sampler=L2EConfig(learning_rate=0.5, alpha_scale=0.1, beta_scale=0.1),
        inner=ChainSchedule(num_steps=40, num_samples=3, thinning=5, batch_size=32, chunk=2),
        tasks=TaskDistribution(datasets=("digits",), channels=(4,), depths=(1,), residual=(False,)),
    ),
    # the paper-form L2E on the embedded data (sklearn digits + generated images), ≤ 10 minutes on 2 CPU cores: the
    # shipped "paper-form" sampler (checkpoints/paper_form; the default preset before Mass-L2E)
    "paper-form": MetaTrainConfig(
        num_outer=300, meta_loss_examples=256, checkpoint_every=25,
        sampler=L2EConfig(learning_rate=0.5, alpha_scale=0.1, beta_scale=0.1),
        inner=ChainSchedule(num_steps=300, num_samples=10, thinning=10, batch_size=64, chunk=2),
        tasks=TaskDistribution(datasets=("digits", "synthetic_images"), channels=(4, 8), depths=(1, 2),
                               residual=(False, True)),
    ),
    # the paper's setting (docs/l2e.md § Meta-training as the paper does it): MNIST, Fashion-MNIST, EMNIST
    # (byclass, 62-class head) and BloodMNIST × CNN channels {4, 8, 16} × depth 1–5 × residual on/off = 120 tasks;
    # 3000 inner steps, 10 samples every 50 steps over the last 500, batch 128; one antithetic pair, σ 0.01, Adam
    # 0.01 (state kept); lr = ε²N 0.5, friction 0.1, T 1, output scales 1e-3 (configurable: sampler.alpha_scale/...).
    # Needs the data: TFDS (mnist, fashion_mnist, emnist; set L2E_TFDS_DOWNLOAD=1 to download) and
    # bloodmnist.npz in $L2E_DATA_DIR/medmnist (or tasks.data_dir). Without TFDS, e.g.:
    #   --preset paper --set tasks.datasets=mnist --set tasks.data_dir=<MNIST dir> --set tasks.max_train=2000
    "paper": MetaTrainConfig(
        num_outer=1000, meta_loss_examples=512, checkpoint_every=100, meta_init="random",
        es=ESConfig(population=2, sigma=0.01, lr=0.01, clip_norm=1.0),
        sampler=L2EConfig(learning_rate=0.5, friction=0.1, temperature=1.0, alpha_scale=1e-3, beta_scale=1e-3),
        inner=ChainSchedule(num_steps=3000, num_samples=10, thinning=50, batch_size=128, chunk=10),
        tasks=TaskDistribution(datasets=("mnist", "fashion_mnist", "emnist_byclass", "bloodmnist"),
                               channels=(4, 8, 16), depths=(1, 2, 3, 4, 5), residual=(False, True)),
    ),
    # Kinetic-L2E (l2e.kinetic, correct by construction) on the default's task distribution and chain length, at
    # SGHMC's step size and friction of the evaluation grids (lr = ε²N 0.1, C = 10: at lr 0.5, C 0.1 the μ ≡ 0
    # start, i.e. SGHMC, diverged on these CNNs); φ₀: μ ≡ 0 (exactly SGHMC); meta-loss: BMA NLL of 10 samples
    # spread over the window after 100 burn-in steps (thinning 20); T_kin of every member logged
    "kinetic": MetaTrainConfig(
        num_outer=300, meta_loss_examples=256, checkpoint_every=25, sampler_kind="kinetic",
        kinetic=KineticConfig(learning_rate=0.1, friction=10.0, temperature=1.0, mu_scale=1.0),
        objective=ObjectiveConfig(kind="bma", burn_in=100, log_temperature=True),
        inner=ChainSchedule(num_steps=300, num_samples=10, thinning=10, batch_size=64, chunk=2),
        tasks=TaskDistribution(datasets=("digits", "synthetic_images"), channels=(4, 8), depths=(1, 2),
                               residual=(False, True)),
    ),
    # the embedded default (offline data: sklearn digits + generated images; ≤ 10 minutes on 2 CPU cores), the
    # shipped "default" sampler: Mass-L2E (l2e.mass, correct by construction: SGHMC whose diagonal mass M and
    # per-coordinate friction C_i a per-coordinate MLP sets from burn-in gradient statistics, frozen for the sampling
    # window) on {digits, synthetic_images} CNNs, at SGHMC's step and friction of the evaluation grids (lr 0.1, C 10);
    # φ₀: output layer 0 (exactly SGHMC); meta-loss: BMA NLL of 10 samples spread over the window after 100 burn-in
    # steps (M, C_i freeze at update 100); T_kin of every member logged
    "default": MetaTrainConfig(
        num_outer=300, meta_loss_examples=256, checkpoint_every=25, sampler_kind="mass", hidden=(16,),
        mass=MassConfig(learning_rate=0.1, friction=10.0, temperature=1.0),
        objective=ObjectiveConfig(kind="bma", burn_in=100, log_temperature=True),
        inner=ChainSchedule(num_steps=300, num_samples=10, thinning=10, batch_size=64, chunk=2),
        tasks=TaskDistribution(datasets=("digits", "synthetic_images"), channels=(4, 8), depths=(1, 2),
                               residual=(False, True)),
    ),
    # the published rows (issue 17; checkpoints/{meta_sgmcmc,precond_l2e,small_l2e}/PROVENANCE.md), each on this
    # machine's ~5-minute budget (2 CPU cores).
    # Meta-SGMCMC as the L2E authors re-ran it (docs/meta_training.md § Meta-SGMCMC as the L2E authors trained it):
    # TBPTT (es.estimator backprop, truncation 50) on the Stein-gradient KL surrogate (objective stein_kl), clips 5 /
    # 100, Adam with clipping, 1-layer heads of 10 units, a fresh task per unroll.  Scaled to ~5 minutes: 1,000 outer
    # iterations of 5,000-step unrolls → 400 iterations (truncations) of 2,000-step unrolls (40 truncations per task, 10
    # tasks drawn; compiling each new task's backprop program costs ~13 s, so unrolls stay long), Adam lr 3e-4 → 1e-3
    # (total travel lr × updates 0.3 → 0.4); one chain (theirs 2), the in-chain form: each truncation's 10 states 5
    # steps apart feed the Stein estimator (median bandwidth; theirs fixed 100); the default preset's tasks; φ₀: Q ≡ 1,
    # D ≡ C (SGHMC)
    "meta-sgmcmc": MetaTrainConfig(
        num_outer=400, meta_loss_examples=256, checkpoint_every=40, sampler_kind="meta_sgmcmc", hidden=(10,),
        meta_sgmcmc=META_SGMCMC_SAMPLER,
        es=ESConfig(estimator="backprop", truncation=50, lr=1e-3, clip_norm=1.0),
        objective=ObjectiveConfig(kind="stein_kl"),
        inner=ChainSchedule(num_steps=2000, num_samples=10, thinning=5, batch_size=64, chunk=2),
        tasks=DEFAULT_TASKS,
    ),
    # Precond-L2E (the L2E paper's Table 11; docs/sampling.md § Meta-SGMCMC and Precond-L2E): Meta-SGMCMC's
    # parameterisation (the heads and clips above) trained the L2E way, our full-length antithetic ES (population 2, σ
    # 0.01, Adam 0.01) on the BMA loss, with the default preset's chain, window and outer budget (300 steps, 10 samples
    # after 100 burn-in steps, 300 iterations); T_kin logged
    "precond-l2e": MetaTrainConfig(
        num_outer=300, meta_loss_examples=256, checkpoint_every=25, sampler_kind="meta_sgmcmc", hidden=(10,),
        meta_sgmcmc=META_SGMCMC_SAMPLER,
        objective=ObjectiveConfig(kind="bma", burn_in=100, log_temperature=True),
        inner=ChainSchedule(num_steps=300, num_samples=10, thinning=10, batch_size=64, chunk=2),
        tasks=DEFAULT_TASKS,
    ),
    # Small-L2E (the L2E paper's Table 11): the paper-form preset on a smaller task distribution — the paper's is
    # Fashion-MNIST only, c = 4, L ∈ {1, 2}; here one dataset (digits), c = 4, depth {1, 2}, plain and residual
    # (the paper does not restrict residual): 4 tasks instead of 16; otherwise the paper-form preset unchanged
    "small-l2e": MetaTrainConfig(
        num_outer=300, meta_loss_examples=256, checkpoint_every=25,
        sampler=L2EConfig(learning_rate=0.5, alpha_scale=0.1, beta_scale=0.1),
        inner=ChainSchedule(num_steps=300, num_samples=10, thinning=10, batch_size=64, chunk=2),
        tasks=TaskDistribution(datasets=("digits",), channels=(4,), depths=(1, 2), residual=(False, True)),
    ),
    # the families users train: a third of the draws image CNNs (the default's), a third tabular classification
    # MLPs, a third UCI regression MLPs (Gaussian likelihood, MILE protocol seed 1), as a weighted list of task
    # strings (tasks.spec_parse.GRAMMAR); the default's sampler, chain and outer budget (MLP iterations cost less
    # than the CNN ones).  Held out of it for evaluation: breast_cancer (the default evaluation) and the UCI sets
    # naval-propulsion-plant, power-plant, wine-quality-red.  Needs the UCI data in $L2E_DATA_DIR/uci (docs/data.md).
    "mixed": MetaTrainConfig(
        num_outer=300, meta_loss_examples=256, checkpoint_every=25,
        sampler=L2EConfig(learning_rate=0.5, alpha_scale=0.1, beta_scale=0.1),
        inner=ChainSchedule(num_steps=300, num_samples=10, thinning=10, batch_size=64, chunk=2),
        tasks=TaskDistribution(tasks=MIXED_TASKS),
    ),
    # Transient-L2E (l2e.transient: learned burn-in, Fisher-preconditioned SGHMC window, no learning rate) meta-trained
    # on fidelity to the NUTS references of the meta-training split (evaluate.reference.META_TRAIN_REFERENCES:
    # digits/mlp-16, wine/mlp-16; the held-out references are never seen) at a short budget, where burn-in is most of
    # the chain: 1,000 updates, 10 samples 50 apart over the last 500 (the window freezes at update 500); meta-loss:
    # TV of the 10-sample BMA to the reference; ES population 8; φ₀ = 0 (the hand-designed counterpart).  ≈ 25 min
    # on 2 CPU cores.  Needs results/references (shipped with the repository).
    "transient": MetaTrainConfig(
        num_outer=200, meta_loss_examples=256, checkpoint_every=25, sampler_kind="transient", hidden=(16,),
        transient=TransientConfig(),
        es=ESConfig(population=8),
        objective=ObjectiveConfig(kind="fidelity", reference="results/references", burn_in=500,
                                  log_temperature=True),
        inner=ChainSchedule(num_steps=1000, num_samples=10, thinning=50, batch_size=64, chunk=2),
        tasks=TaskDistribution(tasks=("digits/mlp-16", "wine/mlp-16")),
    ),
    # Transient-L2E fine-tuned on the banded fidelity objective: starts from the shipped `transient` checkpoint (from
    # φ₀ = 0, 80 iterations did not leave the region where short burn-ins blow up on digits/mlp-16); the transient
    # preset's sampler, tasks and ES, its meta-loss TV + 0.1 × the predictive-variance ratio's log-excess outside
    # [0.8, 1.25] (against the reference draws) + 0.1 × log(1 + |T_kin − T|), averaged over chains of 500 and 2,000
    # updates (freeze at half of each), so the sampler is trained along the budget curve; 80 outer iterations.
    # ≈ 10 min on 2 CPU cores.  Needs results/references (shipped with the repository).
    "transient-band": MetaTrainConfig(
        num_outer=80, meta_loss_examples=256, checkpoint_every=10, sampler_kind="transient", hidden=(16,),
        init_from="transient",
        transient=TransientConfig(),
        es=ESConfig(population=8),
        objective=ObjectiveConfig(kind="fidelity", reference="results/references", burn_in=500,
                                  log_temperature=True, dispersion_weight=0.1, temperature_weight=0.1,
                                  budgets=(500, 2000)),
        inner=ChainSchedule(num_steps=1000, num_samples=10, thinning=50, batch_size=64, chunk=2),
        tasks=TaskDistribution(tasks=("digits/mlp-16", "wine/mlp-16")),
    ),
}
