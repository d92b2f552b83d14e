"""Likelihoods of the task family: what differs between classification and regression tasks (the training NLL,
per-sample predictions, BMA scoring, metrics, curves, per-network error / NLL).  See `Classification` and
`GaussianRegression`; `tasks.Task` and `tasks.RegressionTask` expose them as `task.likelihood`."""
from tasks.likelihoods.categorical import Classification
from tasks.likelihoods.gaussian import GaussianRegression, gaussian_nll

Likelihood = Classification | GaussianRegression

LIKELIHOODS = {"classification": Classification(), "regression": GaussianRegression()}
"""The likelihoods by `kind` (the label a report stores)."""


def likelihood_of(kind: str) -> Likelihood:
    """The likelihood whose `kind` is `kind` ("classification" or "regression"; KeyError otherwise)."""
    return LIKELIHOODS[kind]


__all__ = ["Classification", "GaussianRegression", "LIKELIHOODS", "Likelihood", "gaussian_nll", "likelihood_of"]
