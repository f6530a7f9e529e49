"""A user's own NAS problem, as issue #34 tried it: a scikit-learn MLP on the bundled digits, 1-3 hidden layers
(width per layer) and 4 hyperparameters, at most 4,000 parameters; the objective is validation accuracy.

``mlsysopt nas search --space benchmarks/own_space.py:space --objective benchmarks/own_space.py:train --max-params
4000 --budget 30``; ``benchmarks/nas_own.py`` runs the same problem through the CLI's search, the Python ``Study``
and plain Optuna TPE.
"""

from __future__ import annotations

import itertools
import warnings
from functools import cache
from typing import Any

import numpy as np

from mlsysopt.nas import Blocks, Space

WIDTHS = [8, 16, 24, 32, 48]
EPOCHS = 20


def count_params(params: dict[str, Any]) -> dict[str, float]:
    """Weights and biases of the MLP ``params`` describe (64 inputs, 10 classes)."""
    sizes = [64, *(b["width"] for b in params["blocks"]), 10]
    return {"params": float(sum(a * b + b for a, b in itertools.pairwise(sizes)))}


space = Space(
    knobs={
        "alpha": [1e-5, 1e-4, 1e-3, 1e-2],
        "learning_rate_init": [1e-3, 3e-3, 1e-2, 3e-2],
        "activation": ["relu", "tanh", "logistic"],
        "batch_size": [32, 64, 128, 256],
    },
    blocks=Blocks({"width": WIDTHS}, min=1, max=3),
    resources=count_params,
    name="digits-mlp",
)


@cache
def _data() -> tuple[np.ndarray, ...]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    return x_tr, x_va, y_tr, y_va


def train(params: dict[str, Any], seed: int = 0) -> float:
    """Validation accuracy of the MLP ``params`` describe, trained for 20 epochs with ``seed``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    x_tr, x_va, y_tr, y_va = _data()
    clf = MLPClassifier(
        hidden_layer_sizes=tuple(b["width"] for b in params["blocks"]),
        activation=params["activation"],
        alpha=params["alpha"],
        learning_rate_init=params["learning_rate_init"],
        batch_size=params["batch_size"],
        max_iter=EPOCHS,
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(x_tr, y_tr)
    return float(clf.score(x_va, y_va))
