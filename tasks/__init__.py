"""Tasks for L2E: datasets, splits, models, tasks (Posterior providers) and the task distribution."""
from tasks.datasets import DATASETS, Dataset, DatasetError, load_dataset, read_idx, read_npz_images
from tasks.distribution import TaskDistribution
from tasks.models import ModelSpec, build_model
from tasks.splits import Splits, make_splits
from tasks.task import Task, TaskSpec, build, build_task

__all__ = [
    "DATASETS", "Dataset", "DatasetError", "load_dataset", "read_idx", "read_npz_images",
    "Splits", "make_splits", "ModelSpec", "build_model", "TaskSpec", "Task", "build", "build_task", "TaskDistribution",
]
from tasks.regression import (  # noqa: E402
    RegressionData, RegressionSpec, RegressionTask, build_regression_task, load_uci, synthetic_1d,
)

__all__ += ["RegressionData", "RegressionSpec", "RegressionTask", "build_regression_task", "load_uci", "synthetic_1d"]
