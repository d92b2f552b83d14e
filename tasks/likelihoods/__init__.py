"""Likelihoods of the task family: what differs between classification and regression tasks (the training NLL,
per-sample predictions, BMA scoring, metrics, curves, per-network error / NLL).  See `Classification` and
`GaussianRegression`; `tasks.Task` and `tasks.RegressionTask` expose them as `task.likelihood`."""
from tasks.likelihoods.categorical import Classification
from tasks.likelihoods.gaussian import GaussianRegression, gaussian_nll

Likelihood = Classification | GaussianRegression

__all__ = ["Classification", "GaussianRegression", "Likelihood", "gaussian_nll"]
