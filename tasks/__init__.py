"""Tasks for L2E: datasets, splits, models, likelihoods, tasks (Posterior providers) and the task distribution.

A task = data + model + likelihood + prior: `build(spec, cache)` gives a `Task` (classification, `TaskSpec`) or
a `RegressionTask` (`RegressionSpec`); both expose `posterior`, `init_params`, `predict`, `score`, `metrics`,
`curve`, `error_and_nll` and `kind` (tasks.base.TaskBase).
"""
from tasks.base import TaskBase, TaskCache
from tasks.build import build
from tasks.data.uci import RegressionData, load_uci, synthetic_1d
from tasks.datasets import DATASETS, Dataset, DatasetError, load_dataset, read_idx, read_npz_images
from tasks.distribution import TaskDistribution
from tasks.likelihoods import Classification, GaussianRegression
from tasks.models import ModelSpec, build_model
from tasks.regression import RegressionSpec, RegressionTask, build_regression_task
from tasks.splits import Splits, make_splits
from tasks.task import Task, TaskSpec, build_task

__all__ = [
    "DATASETS", "Dataset", "DatasetError", "load_dataset", "read_idx", "read_npz_images",
    "Splits", "make_splits", "ModelSpec", "build_model", "TaskSpec", "Task", "build", "build_task", "TaskDistribution",
    "RegressionData", "RegressionSpec", "RegressionTask", "build_regression_task", "load_uci", "synthetic_1d",
    "TaskBase", "TaskCache", "Classification", "GaussianRegression",
]
