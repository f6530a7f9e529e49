"""``nas search --latency-model RUN``: the latency oracle as the CNN space's latency measure, confirmed by timing.

A CNN space measures ``latency_ms`` by timing every candidate (20 batch-1 forward passes), a *costly* resource that
the search only checks for the few candidates it proposes. With a latency model the space predicts it instead:
``builtin`` is the oracle shipped with mlsysopt (:mod:`mlsysopt.costmodel.oracle`, trained on real latencies of eleven
model families measured on this machine class), a folder from ``costmodel latency-train`` your own, and a GST run
trained with ``--loss logmse`` on ``costmodel collect`` runtimes is still read. With an oracle, ``latency_ms`` is
the upper end of its 90% interval (a conservative prediction: a candidate it calls feasible meets the limit when
timed, measured in ``benchmarks/latency_oracle.py``). The prediction is not free either (the model is exported to
ONNX and read: ~0.05 s), so it stays a costly resource: the search predicts it lazily, for the candidates its
predictor ranks highest, until enough of them meet the limit (filtering EPNAS's 500-sample pools on it took minutes
per round). After the search :func:`confirm` times the final candidates the way the space does (the best feasible by
prediction, then the next best by validation performance, ``top`` in all) and reports predicted against measured
latency and whether each meets the limit when measured; ``confirmed_best`` is the best of them that does.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import torch

from mlsysopt.costmodel.oracle.api import load_oracle
from mlsysopt.costmodel.oracle.oracle import LatencyOracle
from mlsysopt.costmodel.oracle.settings import Setting
from mlsysopt.errors import MlsysoptError
from mlsysopt.nas.spaces.cnn import CnnSpace


def predicted_space(space: Any, run: str | Path) -> Any:
    """A copy of CNN ``space`` whose ``latency_ms`` is predicted by the cost model in ``run`` (not timed)."""
    if not isinstance(space, CnnSpace):
        raise MlsysoptError(f"--latency-model predicts the latency of CNN spaces (digits, cifar10:/folder), not of "
                            f"'{space.name}' (NAS-Bench-Graph's table has measured latencies)")  # fmt: skip
    load_oracle(run)  # a run that cannot serve as an oracle is refused now, before any folder exists
    out = PredictedLatencyCnnSpace.__new__(PredictedLatencyCnnSpace)
    out.__dict__.update(space.__dict__)
    out.latency_run = str(run)
    out._oracle = None
    out._predicted = {}
    return out


class PredictedLatencyCnnSpace(CnnSpace):
    """A CNN space whose ``latency_ms`` the cost model predicts (see :func:`predicted_space`)."""

    latency_run: str
    _oracle: Any
    _predicted: dict[Any, float]

    def resources_for(self, arch: Any, names: Any) -> dict[str, float]:
        """The space's resources, with ``latency_ms`` predicted by the cost model."""
        out = super().resources_for(arch, [n for n in names if n != "latency_ms"])
        if "latency_ms" in names:
            out["latency_ms"] = self.predicted_ms(arch)
        return out

    def predicted_ms(self, arch: Any) -> float:
        """The oracle's latency of ``arch``'s model (batch 1, one thread; the interval's upper end; cached)."""

        if arch not in self._predicted:
            if self._oracle is None:
                self._oracle = load_oracle(self.latency_run)
            model = self.build(arch).eval()
            x = (torch.zeros(1, *self.input_shape),)
            if isinstance(self._oracle, LatencyOracle):
                with warnings.catch_warnings():  # an out-of-distribution cell is widened, not a warning per cell
                    warnings.simplefilter("ignore")
                    p = self._oracle.predict_module(model, x, Setting("torch", 1, "seq", 1), f"cnn{arch.choices}")
                self._predicted[arch] = p.high
            else:
                self._predicted[arch] = self._oracle.torch_ms(model, x)
        return self._predicted[arch]

    def measured_ms(self, arch: Any) -> float:
        """The latency the plain space would measure (timed here)."""
        return float(self._measure_latency(arch))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the loaded oracle (each worker loads its own); predictions travel along."""
        return {**self.__dict__, "_oracle": None, "_static_cache": {}}


def confirm(space: Any, history: list[Any], constraints: Any, top: int = 3) -> dict[str, Any]:
    """Time the final candidates: predicted vs measured latency, and whether each meets the limits when measured."""
    ok = [ev for ev in history if ev.ok and math.isfinite(ev.perf)]
    feasible = [ev for ev in ok if constraints.feasible(ev.resources)]
    picked = sorted(feasible, key=lambda ev: -ev.perf)[:top]
    rows, best = [], None
    for ev in picked:
        measured = space.measured_ms(ev.arch)
        resources = dict(ev.resources) | {"latency_ms": measured}
        meets = constraints.feasible(resources)
        rows.append({"arch": ev.arch.to_dict(), "perf": ev.perf, "predicted_ms": ev.resources.get("latency_ms"),
                     "measured_ms": measured, "meets_limits_measured": meets})  # fmt: skip
        if meets and best is None:
            best = rows[-1]
    errors = [abs(r["predicted_ms"] / r["measured_ms"] - 1) for r in rows if r["measured_ms"] > 0]
    return {"latency_model": space.latency_run, "candidates": rows, "confirmed_best": best,
            "median_rel_error": float(sorted(errors)[len(errors) // 2]) if errors else None,
            "note": "latency_ms during the search is the cost model's prediction; these candidates were timed "
                    "(median of the space's batch-1 runs, one thread)"}  # fmt: skip
