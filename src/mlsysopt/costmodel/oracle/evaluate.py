"""How good a latency predictor is: within +-10%, Spearman, the best setting picked, within-graph ranking,
few-shot transfer.

The figures nn-Meter and HELP report: the fraction of (model, setting) predictions within +-10% of the measured
time, Spearman's rank correlation over models per setting, and -- the question a user asks the oracle -- whether
the setting it predicts fastest is the fastest measured (and by how much it is slower when not).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from mlsysopt.costmodel.metrics import ranking_metrics
from mlsysopt.costmodel.oracle.dataset import TimedModel
from mlsysopt.costmodel.oracle.predictors import LatencyPredictor
from mlsysopt.costmodel.oracle.settings import Setting


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr  # deferred: SciPy loads only when predictions are ranked

    return float(spearmanr(a, b).statistic) if len(a) > 2 else float("nan")


def accuracy(pred: LatencyPredictor, models: list[TimedModel], settings: list[Setting]) -> dict[str, Any]:
    """``within10`` (fraction of predictions within +-10%), ``spearman`` (mean over settings of the rank
    correlation across models), ``mape`` and ``pairs``."""
    ratios, rhos = [], []
    for s in settings:
        ms = [m for m in models if s.key in m.ms]
        if not ms:
            continue
        p = pred.predict_models(ms, s)
        t = np.array([m.ms[s.key] for m in ms])
        ratios.append(p / t)
        rhos.append(_spearman(p, t))
    r = np.concatenate(ratios) if ratios else np.array([])
    return {"within10": float(np.mean(np.abs(r - 1) <= 0.10)) if r.size else float("nan"),
            "spearman": float(np.nanmean(rhos)) if np.isfinite(rhos).any() else float("nan"),
            "mape": float(np.mean(np.abs(r - 1))) if r.size else float("nan"), "pairs": int(r.size)}  # fmt: skip


def _groups(pred: LatencyPredictor, models: list[TimedModel], settings: list[Setting],
            complete: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:  # fmt: skip
    """``(predicted, measured)`` milliseconds of each model's settings at each batch (``complete``: only models timed
    under every setting of the batch; else any two or more)."""
    for batch in sorted({s.batch for s in settings}):
        group = [s for s in settings if s.batch == batch]
        for m in models:
            timed = [s for s in group if s.key in m.ms]
            if len(timed) < (len(group) if complete else 2):
                continue
            yield (np.array([pred.predict(m.ops, m.nodes, s, m.edges) for s in timed]),
                   np.array([m.ms[s.key] for s in timed]))  # fmt: skip


def best_setting(pred: LatencyPredictor, models: list[TimedModel], settings: list[Setting]) -> dict[str, Any]:
    """Per model and batch, the setting predicted fastest among ``settings`` at that batch vs the measured fastest:
    ``accuracy`` (same setting, or one within the noise floor of 3%) and mean ``regret`` (measured slowdown)."""
    regrets = [t[int(np.argmin(p))] / t.min() - 1 for p, t in _groups(pred, models, settings, complete=True)]
    hits = [r <= 0.03 for r in regrets]
    return {"accuracy": float(np.mean(hits)) if hits else float("nan"),
            "regret": float(np.mean(regrets)) if regrets else float("nan"),
            "regret_p90": float(np.quantile(regrets, 0.9)) if regrets else float("nan"),
            "cases": len(hits)}  # fmt: skip


def within_graph(pred: LatencyPredictor, models: list[TimedModel], settings: list[Setting]) -> dict[str, Any]:
    """The cost model's within-graph ranking figures of a latency predictor: per model and batch, the settings at
    that batch ranked by predicted milliseconds against the measured ones -- ordered pair accuracy and top-k
    slowdown averaged over the (model, batch) groups (:func:`mlsysopt.costmodel.metrics.ranking_metrics`), the
    groups ``costmodel train`` sees in the layout form of the collection.

    Args:
        pred: A fitted predictor.
        models: Timed models.
        settings: The settings to rank (grouped by batch; a group needs two timed settings).

    Returns:
        dict[str, Any]: ``opa``, ``kendall``, ``slowdown_top1`` (and 5, 10), ``num_graphs``.
    """
    pairs = list(_groups(pred, models, settings, complete=False))
    preds, trues = [p for p, _ in pairs], [t for _, t in pairs]
    return ranking_metrics(preds, trues)


def repeatability(models: list[TimedModel], settings: list[Setting]) -> dict[str, Any]:
    """How well the machine reproduces its own times: each timed round of a model against the median of its other
    rounds, scored like a prediction (``within10``: the fraction within +-10%). A predictor scored against median
    labels is judged by a ruler this coarse; one that beats a fresh measurement here is at the noise's limit.

    Args:
        models: Timed models with their rounds (a model with one round of a setting is skipped there; with two,
            each round is scored against the other).
        settings: The settings to score.

    Returns:
        dict[str, Any]: ``within10`` overall, ``by_setting`` ``{setting: within10}``, ``pairs``.
    """
    hits: dict[str, list[bool]] = {}
    for s in settings:
        rounds = [np.asarray(m.rounds[s.key], float) for m in models if len(m.rounds.get(s.key, ())) >= 2]
        hits[s.key] = [bool(abs(r[k] / np.median(np.delete(r, k)) - 1) <= 0.10) for r in rounds for k in range(len(r))]
    every = [h for v in hits.values() for h in v]
    return {"within10": float(np.mean(every)) if every else float("nan"),
            "by_setting": {k: float(np.mean(v)) for k, v in hits.items() if v}, "pairs": len(every),
            "how": "one round vs the median of the model's other rounds (minutes apart, fresh sessions)"}  # fmt: skip


def calibrate(pred: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """``(a, b)`` of ``log t = a + b log p`` fitted on a few measured models (b shrunk towards 1, so ten points
    give a scale and a mild slope)."""
    lp, lt = np.log(pred), np.log(measured)
    n = len(lp)
    lam = 5.0  # ridge towards b = 1, in units of points
    xm, ym = lp.mean(), lt.mean()
    sxx = float(((lp - xm) ** 2).sum())
    sxy = float(((lp - xm) * (lt - ym)).sum())
    b = (sxy + lam * sxx / max(n, 1)) / (sxx + lam * sxx / max(n, 1)) if sxx > 0 else 1.0
    return float(ym - b * xm), float(b)


def fewshot(factory: Any, train: list[TimedModel], test: list[TimedModel], held: Setting,
            settings: list[Setting], ns: tuple[int, ...] = (0, 5, 10, 20), seed: int = 0,
            fitted: LatencyPredictor | None = None) -> dict[str, Any]:  # fmt: skip
    """HELP's question: ``held`` is left out of training entirely; with ``n`` models of it measured, calibrate the
    prediction and score the rest of ``test`` under ``held``.

    Args:
        factory: Makes an unfitted predictor.
        train: Models to train on (``held``'s times are not used).
        test: Models of the new setting: ``n`` of them (drawn by ``seed``) calibrate, the others score.
        held: The setting kept out.
        settings: Every setting; ``held`` is removed from those trained.
        ns: Numbers of measured models to try (0: the prediction as is).
        seed: Seed of the draw.
        fitted: ``factory()`` already fitted on ``train`` without ``held`` (one fit serves every draw).

    Returns:
        dict[str, Any]: ``{n: {"spearman", "within10"}}`` and the setting.
    """
    model = fitted or factory().fit(train, [s for s in settings if s.key != held.key])
    pool = [m for m in test if held.key in m.ms]
    p_all = model.predict_models(pool, held)
    t_all = np.array([m.ms[held.key] for m in pool])
    out: dict[str, Any] = {"setting": held.key}
    rng = np.random.default_rng(seed)
    for n in ns:
        idx = rng.permutation(len(pool))
        shot, rest = idx[:n], idx[n:]
        a, b = calibrate(p_all[shot], t_all[shot]) if n >= 2 else (0.0, 1.0)
        p = np.exp(a + b * np.log(p_all[rest]))
        t = t_all[rest]
        out[str(n)] = {"spearman": _spearman(p, t), "within10": float(np.mean(np.abs(p / t - 1) <= 0.10))}
    return out
