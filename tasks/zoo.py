"""The zoo: the posteriors with project-computed NUTS references (results/references/), their families, the NUTS
settings that rebuild each one (`python -m evaluate reference --suite zoo`), and the split into a meta-training half
and a held-out half.

The split rule (written down before any sampler ran on a zoo posterior; `split`):
  1. every entry belongs to one stratum: "cnn" (a convolutional network), else "large-n" (at least
     LARGE_N = 5,000 training points), else "other";
  2. the references a shipped learned sampler was already meta-trained against (FORCED_TRAIN: digits/mlp-16,
     wine/mlp-16) are in the meta-training half;
  3. the other entries of each stratum are ordered by the SHA-256 of their task name (hex digest, ascending) and
     dealt alternately, held out first: the 1st, 3rd, 5th... are held out, the 2nd, 4th... meta-training.
The split is over every entry of ZOO, converged or not; a reference that did not converge (function-space split
R̂ max ≥ ZOO_RHAT, a divergence or fewer than ZOO_MIN_CHAINS chains) is listed and used by neither half.
Meta-training may read the meta-training half only (`train_names`); the leaderboard runs on the held-out half.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

LARGE_N = 5000
"""Training points from which a posterior counts as large-N (minibatch noise dominates at B = 100)."""
ZOO_RHAT = 1.05
"""A zoo reference is converged when its function-space split R̂ max is below this, with no divergent transition
and at least ZOO_MIN_CHAINS chains."""
ZOO_MIN_CHAINS = 4
FORCED_TRAIN = ("digits/mlp-16", "wine/mlp-16")
"""Meta-training references of the shipped learned samplers: always in the meta-training half (rule 2)."""


@dataclass(frozen=True)
class ZooEntry:
    """One zoo posterior: its task string, its NUTS settings and the key index (key fold_in(PRNGKey(0), key)).

    gpu: the committed reference was computed on a GPU (a rebuild on a CPU gives an equivalent, not identical,
    reference). keep_draws / keep_rows: classification draws kept with their test probabilities, on at most
    keep_rows evenly spaced test points (None: every point).
    """

    task: str
    key: int
    warmup: int = 300
    samples: int = 100
    thinning: int = 1
    chains: int = 4
    max_doublings: int = 10
    keep_draws: int = 200
    keep_rows: int | None = None
    gpu: bool = False
    note: str = ""

    @property
    def spec(self):
        """The entry's task spec (TaskSpec or RegressionSpec)."""
        from tasks.task_strings import resolve_task

        return resolve_task(self.task).spec

    @property
    def name(self) -> str:
        """The report name and reference index key (tasks.reference.task_name)."""
        from tasks.reference.files import task_name

        return task_name(self.spec)

    @property
    def model(self) -> str:
        """"linear", "mlp" or "cnn"."""
        spec = self.spec
        if self.kind == "regression":
            return "mlp" if spec.hidden else "linear"
        if spec.model.kind == "cnn":
            return "cnn"
        return "mlp" if spec.model.hidden else "linear"

    @property
    def kind(self) -> str:
        """"regression" or "classification"."""
        from tasks.regression import RegressionSpec

        return "regression" if isinstance(self.spec, RegressionSpec) else "classification"

    @property
    def likelihood(self) -> str:
        """"binary", "multiclass", "heteroscedastic" or "homoscedastic"."""
        if self.kind == "regression":
            return "homoscedastic" if self.spec.noise == "homo" else "heteroscedastic"
        return "binary" if self.task.split("/")[0].split(":")[0] in BINARY else "multiclass"


BINARY = frozenset({"breast_cancer", "breastmnist", "pneumoniamnist"})
"""Registered classification sets with two classes."""

_UCI = "uci:"
ZOO: tuple[ZooEntry, ...] = (
    # the first seven: the references of issue 12 (their keys: their index in evaluate.reference.REFERENCE_TASKS)
    ZooEntry(_UCI + "power-plant/mlp-linear", 0, warmup=500, samples=50, thinning=4),
    ZooEntry("digits/mlp-32", 1, warmup=200, keep_draws=400),
    ZooEntry("mnist/mlp-8:max=10000", 2, warmup=800, samples=200, thinning=4, max_doublings=8, keep_draws=400,
             gpu=True),
    ZooEntry("mnist/mlp-linear:max=10000", 3, warmup=300, samples=150, max_doublings=8, keep_draws=100,
             keep_rows=2000, gpu=True, note="draw_probs from an independent CPU run of the same configuration"),
    ZooEntry("breast_cancer/mlp-16", 4, keep_draws=400),
    ZooEntry("digits/mlp-16", 5, keep_draws=400),
    ZooEntry("wine/mlp-16", 6, keep_draws=400),
    # CNNs (8x8 images) on the first 300 training images (240 after the validation split): NUTS on all 1,150 digits
    # took 5.2 ms per gradient inside its trees at the depth cap (about 26 min per reference); a tree-depth cap of 8
    # and a warm-up of 150 keep each at minutes
    ZooEntry("digits/cnn-c2-d1:max=300", 100, warmup=150, max_doublings=8, keep_rows=250),
    ZooEntry("digits/cnn-c4-d1:max=300", 101, warmup=150, max_doublings=8, keep_rows=250),
    ZooEntry("digits/cnn-c4-d1-res:max=300", 102, warmup=150, max_doublings=8, keep_rows=250),
    ZooEntry("digits/cnn-c2-d2:max=300", 103, warmup=150, max_doublings=8, keep_rows=250),
    ZooEntry("digits/cnn-c2-d1:max=300:prior=0.05", 104, warmup=300, thinning=2, max_doublings=8, keep_rows=250,
             note="warm-up 300 and every 2nd transition kept: at warm-up 150 R-hat max read 1.133"),
    ZooEntry("synthetic_images/cnn-c2-d1:max=300", 105, warmup=150, max_doublings=8, keep_rows=250),
    ZooEntry("synthetic_images_b/cnn-c2-d1:max=300", 106, warmup=300, thinning=2, max_doublings=8, keep_rows=250,
             note="warm-up 300 and every 2nd transition kept: at warm-up 150 R-hat max read 1.106"),
    ZooEntry("digits/cnn-c2-d1-res:max=300", 107, warmup=300, thinning=2, max_doublings=8, keep_rows=250,
             note="warm-up 300 and every 2nd transition kept: at warm-up 150 R-hat max read 1.182"),
    ZooEntry("synthetic_images/cnn-c4-d1-res:max=300", 108, warmup=150, max_doublings=8, keep_rows=250),
    ZooEntry("synthetic_images_b/cnn-c4-d1-res:max=300", 109, warmup=150, max_doublings=8, keep_rows=250),
    ZooEntry("digits/cnn-c8-d1-res:max=300", 99, warmup=150, max_doublings=8, keep_rows=250),
    # MLPs and linear models on images and tables
    ZooEntry("digits/mlp-linear", 110, keep_rows=250),
    ZooEntry("digits/mlp-8-tanh", 111, keep_rows=250),
    ZooEntry("digits/mlp-16:prior=0.05", 112, keep_rows=250),
    ZooEntry("digits/mlp-64:prior=0.05", 113, keep_rows=250),
    ZooEntry("synthetic_images/mlp-linear", 114, keep_rows=250),
    ZooEntry("synthetic_images/mlp-16-tanh", 115, keep_rows=250),
    ZooEntry("synthetic_images_b/mlp-32", 116, keep_rows=250),
    ZooEntry("iris/mlp-linear", 117),
    ZooEntry("iris/mlp-8-tanh", 118),
    ZooEntry("wine/mlp-linear:prior=1", 119),
    ZooEntry("wine/mlp-8x8-tanh", 120),
    ZooEntry("breast_cancer/mlp-linear", 121),
    ZooEntry("breast_cancer/mlp-8-tanh", 122),
    ZooEntry("breast_cancer/mlp-16x16-tanh:prior=0.05", 123),
    ZooEntry("synthetic_images_b/mlp-linear", 124, keep_rows=250),
    ZooEntry("iris/mlp-4-tanh", 125),
    ZooEntry("breast_cancer/mlp-4-tanh", 126),
    # large N
    ZooEntry("synthetic_tabular/mlp-linear", 130, keep_rows=500),
    ZooEntry("synthetic_tabular/mlp-8-tanh", 131, keep_rows=500),
    ZooEntry(_UCI + "kin8nm/mlp-linear", 132, samples=40, thinning=2),
    ZooEntry(_UCI + "kin8nm/mlp-8-tanh", 133, samples=40, thinning=2),
    ZooEntry(_UCI + "naval-propulsion-plant/mlp-linear", 134, samples=40, thinning=2),
    ZooEntry(_UCI + "power-plant/mlp-linear:noise=homo", 135, samples=60, thinning=3),
    ZooEntry(_UCI + "kin8nm/mlp-linear:noise=homo", 136, samples=60, thinning=3),
    ZooEntry("synthetic_tabular/mlp-4-tanh", 160, keep_rows=500),
    ZooEntry("synthetic_tabular/mlp-linear:prior=1", 161, keep_rows=500),
    ZooEntry(_UCI + "power-plant/mlp-linear:prior=0.1", 162, samples=60, thinning=3),
    ZooEntry(_UCI + "kin8nm/mlp-linear:prior=0.1", 163, samples=60, thinning=3),
    # regression, small N
    ZooEntry(_UCI + "yacht/mlp-linear", 140),
    ZooEntry(_UCI + "energy/mlp-linear", 141),
    ZooEntry(_UCI + "concrete/mlp-linear:prior=0.1", 142),
    ZooEntry(_UCI + "airfoil/mlp-linear", 143),
    ZooEntry(_UCI + "wine-quality-red/mlp-linear", 144),
    ZooEntry(_UCI + "bostonHousing/mlp-8-tanh:prior=0.1", 145),
    ZooEntry(_UCI + "yacht/mlp-8-tanh:prior=0.1", 146),
    ZooEntry(_UCI + "yacht/mlp-linear:noise=homo", 147),
    ZooEntry(_UCI + "concrete/mlp-8-tanh:noise=homo:prior=0.1", 148),
    ZooEntry(_UCI + "energy/mlp-8-tanh:noise=homo:prior=0.1", 149),
    ZooEntry(_UCI + "bostonHousing/mlp-linear", 150),
    ZooEntry(_UCI + "airfoil/mlp-linear:noise=homo", 151),
    ZooEntry(_UCI + "wine-quality-red/mlp-linear:noise=homo", 152),
)
"""Every zoo posterior, in the order the suite computes them (CNNs first: the longest jobs start first)."""


DATA_SIZES = {
    "uci:power-plant[mile-s1]/mlp-linear": 6697, "digits/mlp-32": 1150, "mnist/mlp-8-n10000": 8000,
    "mnist/mlp-linear-n10000": 8000, "breast_cancer/mlp-16": 364, "digits/mlp-16": 1150, "wine/mlp-16": 114,
    "digits/cnn-c2-d1-n300": 240, "digits/cnn-c4-d1-n300": 240, "digits/cnn-c4-d1-res-n300": 240,
    "digits/cnn-c2-d2-n300": 240, "digits/cnn-c2-d1-n300-p0.05": 240, "synthetic_images/cnn-c2-d1-n300": 240,
    "synthetic_images_b/cnn-c2-d1-n300": 240,
    "digits/mlp-linear": 1150, "digits/mlp-8-tanh": 1150, "digits/mlp-16-p0.05": 1150, "digits/mlp-64-p0.05": 1150,
    "synthetic_images/mlp-linear": 1600, "synthetic_images/mlp-16-tanh": 1600, "synthetic_images_b/mlp-32": 1600,
    "iris/mlp-linear": 96, "iris/mlp-8-tanh": 96, "wine/mlp-linear-p1": 114, "wine/mlp-8x8-tanh": 114,
    "breast_cancer/mlp-linear": 364, "breast_cancer/mlp-8-tanh": 364, "breast_cancer/mlp-16x16-tanh-p0.05": 364,
    "synthetic_tabular/mlp-linear": 10000, "synthetic_tabular/mlp-8-tanh": 10000,
    "uci:kin8nm[mile-s1]/mlp-linear": 5734, "uci:kin8nm[mile-s1]/mlp-8-tanh": 5734,
    "uci:naval-propulsion-plant[mile-s1]/mlp-linear": 8353, "uci:yacht[mile-s1]/mlp-linear": 215,
    "uci:energy[mile-s1]/mlp-linear": 537, "uci:concrete[mile-s1]/mlp-linear-p0.1": 721,
    "uci:airfoil[mile-s1]/mlp-linear": 1052, "uci:wine-quality-red[mile-s1]/mlp-linear": 1119,
    "uci:bostonHousing[mile-s1]/mlp-8-tanh-p0.1": 354, "uci:yacht[mile-s1]/mlp-8-tanh-p0.1": 215,
    "uci:power-plant[mile-s1]/mlp-linear-homo": 6697, "uci:kin8nm[mile-s1]/mlp-linear-homo": 5734,
    "uci:yacht[mile-s1]/mlp-linear-homo": 215, "synthetic_tabular/mlp-4-tanh": 10000,
    "synthetic_tabular/mlp-linear-p1": 10000, "uci:power-plant[mile-s1]/mlp-linear-p0.1": 6697,
    "uci:kin8nm[mile-s1]/mlp-linear-p0.1": 5734,
    "synthetic_images_b/cnn-c4-d1-res-n300": 240, "digits/cnn-c8-d1-res-n300": 240, "digits/cnn-c2-d1-res-n300": 240,
    "synthetic_images/cnn-c4-d1-res-n300": 240, "synthetic_images_b/mlp-linear": 1600, "iris/mlp-4-tanh": 96,
    "breast_cancer/mlp-4-tanh": 364, "uci:bostonHousing[mile-s1]/mlp-linear": 354,
    "uci:airfoil[mile-s1]/mlp-linear-homo": 1052, "uci:wine-quality-red[mile-s1]/mlp-linear-homo": 1119, "uci:concrete[mile-s1]/mlp-8-tanh-homo-p0.1": 721,
    "uci:energy[mile-s1]/mlp-8-tanh-homo-p0.1": 537,
}
"""{task name: training points} of every entry (the tests check them against the built tasks): the split needs no
data."""


def zoo_verdict(metadata: dict) -> str | None:
    """Why a reference's metadata fails the zoo's convergence rule (function-space split R̂ max below ZOO_RHAT, no
    divergent transition, at least ZOO_MIN_CHAINS chains, finite draws), or None when it passes."""
    import math

    if not metadata.get("finite", False):
        return "non-finite draws"
    rhat = ((metadata.get("function_space") or {}).get("split_rhat") or {}).get("max")
    if not isinstance(rhat, (int, float)) or not math.isfinite(rhat):
        return "no function-space split R-hat in its metadata"
    if rhat >= ZOO_RHAT:
        return f"function-space split R-hat max {rhat:.3f} >= {ZOO_RHAT}"
    divergent = metadata.get("num_divergent")
    if not isinstance(divergent, int) or divergent:
        return f"{divergent} divergent transitions"
    chains = (metadata.get("sampler") or {}).get("chains")
    if not isinstance(chains, int) or chains < ZOO_MIN_CHAINS:
        return f"{chains} chains (< {ZOO_MIN_CHAINS})"
    return None


def zoo_converged(metadata: dict) -> bool:
    """Whether a reference's metadata passes the zoo's convergence rule (`zoo_verdict`)."""
    return zoo_verdict(metadata) is None


def by_name() -> dict[str, ZooEntry]:
    """{task name: entry} of ZOO."""
    return {e.name: e for e in ZOO}


def stratum(entry: ZooEntry, data_size: int) -> str:
    """Rule 1: "cnn", "large-n" or "other" (`data_size`: the task's training points)."""
    if entry.model == "cnn":
        return "cnn"
    return "large-n" if data_size >= LARGE_N else "other"


def families(entry: ZooEntry, data_size: int) -> tuple[str, ...]:
    """The leaderboard's family tags of an entry: its model (linear / mlp / cnn), "classification" or "regression",
    its likelihood, and "large-n" when data_size ≥ LARGE_N."""
    return (entry.model, entry.kind, entry.likelihood) + (("large-n",) if data_size >= LARGE_N else ())


def split(data_sizes: dict[str, int] | None = None) -> dict[str, str]:
    """{task name: "train" or "held_out"} of every ZOO entry by the module's rule; data_sizes: {task name: training
    points} (default DATA_SIZES)."""
    data_sizes = DATA_SIZES if data_sizes is None else data_sizes
    out, strata = {}, {}
    for e in ZOO:
        if e.name in FORCED_TRAIN:
            out[e.name] = "train"
        else:
            strata.setdefault(stratum(e, data_sizes[e.name]), []).append(e.name)
    for names in strata.values():
        for i, name in enumerate(sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())):
            out[name] = "held_out" if i % 2 == 0 else "train"
    return out


def train_names() -> tuple[str, ...]:
    """The meta-training half's task names, in ZOO order: all meta-training may read."""
    halves = split()
    return tuple(e.name for e in ZOO if halves[e.name] == "train")


def held_out_names() -> tuple[str, ...]:
    """The held-out half's task names, in ZOO order."""
    halves = split()
    return tuple(e.name for e in ZOO if halves[e.name] == "held_out")
