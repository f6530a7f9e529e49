"""Ranking metrics for configuration runtimes (OPA, Kendall τ, top-k slowdown) and classification metrics.

Conventions (lower predicted score = predicted faster, as for runtimes):

* ``opa`` counts config pairs with different true runtimes; a pair the prediction orders the same way scores 1, the
  other way 0, and a tie in the prediction 1/2. So a perfect predictor scores 1, the reversed one 0 and a constant
  one 0.5 (chance), never a free 1. Pairs tied in the truth carry no order and are skipped.
* ``kendall_tau`` is scipy's τ-b (ties in either input handled). A constant prediction scores 0.
* ``slowdown_at_k`` breaks ties in the prediction *against* the model (among equally scored configs the truly
  slower ones are taken first), so a constant predictor cannot pick the best config by index luck.
* A graph whose truth has no order (one config, or all runtimes equal) gets NaN for OPA and Kendall τ ("undefined");
  ``ranking_metrics`` averages each metric over the graphs where it is defined and reports NaN only if none is.

Inputs must be finite and of matching lengths; anything else raises :class:`~mlsysopt.errors.InvalidOption`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from mlsysopt.errors import InvalidOption

TOP_K: tuple[int, ...] = (1, 5, 10)


def _pair(pred: np.ndarray, true: np.ndarray, what: str = "runtimes") -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pred, dtype=np.float64).reshape(-1) if np.ndim(pred) <= 1 else None
    t = np.asarray(true, dtype=np.float64).reshape(-1) if np.ndim(true) <= 1 else None
    if p is None or t is None:
        raise InvalidOption(
            f"predictions and true {what} must be 1-D, got shapes {np.shape(pred)} and {np.shape(true)}"
        )
    if p.shape != t.shape:
        raise InvalidOption(f"{p.size} predictions for {t.size} true {what}: lengths must match")
    if not np.isfinite(p).all():
        raise InvalidOption(f"predictions contain NaN or inf ({int((~np.isfinite(p)).sum())} of {p.size})")
    if not np.isfinite(t).all():
        raise InvalidOption(f"true {what} contain NaN or inf ({int((~np.isfinite(t)).sum())} of {t.size})")
    return p, t


def _tied_pairs(x: np.ndarray) -> int:
    """Number of pairs with equal values."""
    _, counts = np.unique(x, return_counts=True)
    return int((counts * (counts - 1) // 2).sum())


def opa(pred: np.ndarray, true: np.ndarray) -> float:
    """Ordered pair accuracy: fraction of pairs (with distinct true runtimes) that ``pred`` orders correctly.

    O(C log C): with C concordant and D discordant pairs among the N pairs untied in the truth, pairs tied only in
    the prediction are the rest, so OPA = (C + (N - C - D) / 2) / N = 1/2 + (C - D) / (2N), and C - D comes from τ-b.

    Args:
        pred: Predicted scores, lower = predicted faster.
        true: True runtimes.

    Shapes:
        pred: (num_configs,) float
        true: (num_configs,) float

    Returns:
        float: OPA in [0, 1]; 0.5 when the prediction has no order; NaN when the truth has none.

    Raises:
        InvalidOption: If the arrays differ in length or hold NaN or inf.
    """
    p, t = _pair(pred, true)
    total = p.size * (p.size - 1) // 2
    untied_true = total - _tied_pairs(t)
    if untied_true == 0:
        return math.nan
    untied_pred = total - _tied_pairs(p)
    if untied_pred == 0:
        return 0.5
    tau = stats.kendalltau(p, t).statistic
    conc_minus_disc = tau * math.sqrt(untied_pred) * math.sqrt(untied_true)
    return float(min(1.0, max(0.0, 0.5 + conc_minus_disc / (2 * untied_true))))


def kendall_tau(pred: np.ndarray, true: np.ndarray) -> float:
    """Kendall τ-b between predicted scores and true runtimes (scipy); NaN if the truth has no order.

    Args:
        pred: Predicted scores, lower = predicted faster.
        true: True runtimes.

    Shapes:
        pred: (num_configs,) float
        true: (num_configs,) float

    Returns:
        float: Kendall tau-b in [-1, 1]; 0 for a constant prediction; NaN for fewer than 2 configs or equal runtimes.

    Raises:
        InvalidOption: If the arrays differ in length or hold NaN or inf.
    """
    p, t = _pair(pred, true)
    if p.size < 2 or np.all(t == t[0]):
        return math.nan
    if np.all(p == p[0]):
        return 0.0
    return float(stats.kendalltau(p, t).statistic)


def slowdown_at_k(pred: np.ndarray, true: np.ndarray, k: int) -> float:
    """(best true runtime among the k lowest predictions − true best) / true best; 0 means the best was found.

    Args:
        pred: Predicted scores, lower = predicted faster.
        true: True runtimes, all > 0.
        k: How many of the top predicted configurations count, >= 1.

    Returns:
        float: Relative slowdown, >= 0 (0 when the true best is among the top ``k``).

    Shapes:
        pred: (num_configs,) float
        true: (num_configs,) float

    Raises:
        InvalidOption: For ``k`` < 1, mismatched or empty arrays, NaN or inf, or a non-positive runtime.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InvalidOption(f"k must be an integer >= 1, got {k!r}")
    p, t = _pair(pred, true)
    if p.size == 0:
        raise InvalidOption("slowdown needs at least one configuration")
    best = float(t.min())
    if best <= 0:
        raise InvalidOption(f"true runtimes must be > 0 for a relative slowdown, got minimum {best}")
    top = np.lexsort((-t, p))[: int(k)]  # by prediction, ties broken towards slower configs
    return float((t[top].min() - best) / best)


def ranking_metrics(preds: Sequence[np.ndarray], trues: Sequence[np.ndarray]) -> dict[str, float]:
    """Per-graph OPA, Kendall τ and top-1/5/10 slowdown averaged over graphs (undefined values skipped).

    Args:
        preds: Predicted scores per graph (lower = predicted faster).
        trues: True runtimes per graph, aligned with ``preds``.

    Returns:
        dict[str, float]: ``opa``, ``kendall``, ``slowdown_top1``/``5``/``10`` (means over graphs, NaN skipped),
        ``num_graphs`` and ``num_ranked_graphs``.

    Shapes:
        preds[i]: (num_configs_i,) float
        trues[i]: (num_configs_i,) float

    Raises:
        InvalidOption: If the lists differ in length or are empty, or a graph's arrays are invalid.
    """
    if len(preds) != len(trues):
        raise InvalidOption(f"{len(preds)} prediction arrays for {len(trues)} graphs: lengths must match")
    if len(preds) == 0:
        raise InvalidOption("ranking metrics need at least one graph")
    rows: dict[str, list[float]] = {"opa": [], "kendall": [], **{f"slowdown_top{k}": [] for k in TOP_K}}
    for i, (p, t) in enumerate(zip(preds, trues, strict=True)):
        try:
            rows["opa"].append(opa(p, t))
            rows["kendall"].append(kendall_tau(p, t))
            for k in TOP_K:
                rows[f"slowdown_top{k}"].append(slowdown_at_k(p, t, k))
        except InvalidOption as exc:
            raise InvalidOption(f"graph {i}: {exc}") from None
    out = {key: _nanmean(vals) for key, vals in rows.items()}
    out["num_graphs"] = len(preds)
    out["num_ranked_graphs"] = int(np.isfinite(rows["opa"]).sum())
    return out


def _nanmean(values: list[float]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else math.nan


def _labels(pred: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pred)
    if p.ndim == 2:  # class scores / logits: the predicted class is the arg-max
        p = p.argmax(axis=1)
    y = np.asarray(labels)
    if p.ndim != 1 or y.ndim != 1:
        raise InvalidOption(f"labels must be 1-D (scores 2-D), got shapes {np.shape(pred)} and {y.shape}")
    if p.shape != y.shape:
        raise InvalidOption(f"{p.size} predicted labels for {y.size} true labels: lengths must match")
    if p.size == 0:
        raise InvalidOption("classification metrics need at least one graph")
    for name, arr in (("predicted", p), ("true", y)):
        if not np.issubdtype(arr.dtype, np.integer) and not np.all(np.mod(arr, 1) == 0):
            raise InvalidOption(f"{name} labels must be integer class ids")
    return p.astype(np.int64), y.astype(np.int64)


def accuracy(pred_labels: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of correct labels; ``pred_labels`` may also be (N, classes) scores.

    Args:
        pred_labels: Predicted class ids, or class scores / logits (arg-max taken).
        labels: True class ids.

    Shapes:
        pred_labels: (num_graphs,) int or (num_graphs, num_classes) float
        labels: (num_graphs,) int

    Returns:
        float: Accuracy in [0, 1].

    Raises:
        InvalidOption: If the shapes differ or are not 1-D (2-D scores), there are no graphs, or labels are not
            integers.
    """
    p, y = _labels(pred_labels, labels)
    return float((p == y).mean())


def macro_f1(pred_labels: np.ndarray, labels: np.ndarray) -> float:
    """Unweighted mean of per-class F1 over the classes in the truth or the prediction (scikit-learn's ``f1_score``).

    Args:
        pred_labels: Predicted class ids, or class scores / logits (arg-max taken).
        labels: True class ids.

    Shapes:
        pred_labels: (num_graphs,) int or (num_graphs, num_classes) float
        labels: (num_graphs,) int

    Returns:
        float: Macro-F1 in [0, 1].

    Raises:
        InvalidOption: If the shapes differ or are not 1-D (2-D scores), there are no graphs, or labels are not
            integers.
    """
    from sklearn.metrics import f1_score  # deferred: scikit-learn takes ~1 s to import, only classification needs it

    p, y = _labels(pred_labels, labels)
    return float(f1_score(y, p, average="macro", labels=np.union1d(p, y), zero_division=0.0))


def classification_metrics(pred_labels: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy and macro-F1 in one dict (plus the number of graphs).

    Args:
        pred_labels: Predicted class ids, or class scores / logits (arg-max taken).
        labels: True class ids.

    Shapes:
        pred_labels: (num_graphs,) int or (num_graphs, num_classes) float
        labels: (num_graphs,) int

    Returns:
        dict[str, float]: ``accuracy``, ``macro_f1`` and ``num_graphs``.

    Raises:
        InvalidOption: If the shapes differ or are not 1-D (2-D scores), there are no graphs, or labels are not
            integers.
    """
    return {
        "accuracy": accuracy(pred_labels, labels),
        "macro_f1": macro_f1(pred_labels, labels),
        "num_graphs": int(np.asarray(labels).shape[0]),
    }
