"""The leaderboard (`python -m evaluate leaderboard`): every method's budget curves (evaluate.curve) on the held-out
half of the zoo (tasks.zoo), run task by task and resumable, aggregated into one table — reach rate, median
gradients-to-floor ratio to each task's best row, its tuning-inclusive twin, rank stability under a bootstrap over
tasks, a family breakdown — and Dolan–Moré performance profiles (aggregate: the numbers, pure functions; select: the
tasks; store: the directory's files; report: leaderboard.md and the PNGs; cli: the command)."""

CORE_METHODS = ("noisy_de", "psgld", "precond_rmsprop", "adaptive_sghmc", "sghmc", "sgld_cv", "sghmc_cv", "mile",
                "l2e_transient", "l2e_mass")
"""The leaderboard's default methods (--methods replaces them; --method adds a user's sampler)."""
DEFAULT_BUDGETS = (250, 500, 1000, 2000, 4000, 8000)
DEFAULT_EXTEND = 32000
"""Where no row solves any seed of a task by the largest budget, the task's curves continue at this budget."""
PRESET = "references"
"""The evaluation preset whose K, batch size, grids and method settings the curves use (its tasks are replaced by the
zoo's)."""
