"""``serving tune --cost-model RUN``: a trained cost model narrows the op-level knobs before anything is measured.

The latency oracle (``builtin``: :mod:`mlsysopt.costmodel.oracle`, shipped, trained on real latencies measured on
this machine class; or an oracle folder, or a GST run trained with ``--loss logmse``) predicts one inference's time
under each op-level setting of ONNX Runtime: intra-op threads, and sequential or parallel execution. That is the
part of serving it sees; instances, batching and queueing are the load's, which it does not. So it is used where it
fits: the op-level settings whose predicted time is within ``tolerance`` of the predicted best are kept (plus the
default's own setting, so that the verdict still compares against ONNX Runtime's out-of-the-box serving), and the
tuner searches the request-level knobs over those pairs only (``Space(op_levels=...)``: a kept ``i1 par`` and ``i2
seq`` do not bring ``i2 par`` back). A wrong prediction can cost the optimum;
``result.json["cost_model"]`` lists every prediction and what was kept, so the narrowing can be checked (or the tune
rerun without it).

:func:`serving_prior` turns the same predictions into *history records* in the serving contract's format
(``Measurement.to_dict()``): one per op-level configuration of the space at its smallest request-level setting (one
instance, no batching), ``extra.source = "costmodel prediction"``; request-level knobs are the queue's business,
which a per-inference cost model does not see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import InvalidOption, MlsysoptError
from mlsysopt.serving.backend import Measurement

if TYPE_CHECKING:  # the CLI reads DEFAULT_TOLERANCE at start-up: nothing heavy here
    from mlsysopt.serving.space import Space

DEFAULT_TOLERANCE = 0.2  # keep settings predicted at most 20% slower than the predicted best


@dataclass(frozen=True)
class OpLevelShortlist:
    """The op-level settings a cost model kept: the knob values and every prediction behind them."""

    run: str
    tolerance: float
    predicted: tuple[tuple[int, int, float], ...]  # (intra_threads, execution_mode, predicted ms), best first
    kept: tuple[tuple[int, int], ...]  # (intra_threads, execution_mode) pairs kept, the default's included
    default: tuple[int, int]

    @property
    def knobs(self) -> dict[str, tuple[int, ...]]:
        """The narrowed knob lists (the kept pairs' values; the space leaves out the other pairs of their product:
        ``Space(op_levels=kept)``)."""
        return {
            "intra_threads": tuple(sorted({i for i, _ in self.kept})),
            "execution_mode": tuple(sorted({m for _, m in self.kept})),
        }

    def describe(self) -> str:
        """One line for the console: what was kept of how many, and the predicted best."""
        i, m, ms = self.predicted[0]
        return (
            f"cost model {self.run}: kept {len(self.kept)} of {len(self.predicted)} op-level settings "
            f"({', '.join(op_label(*p) for p in self.kept)}; predicted best {op_label(i, m)} {ms:.3g} ms; within "
            f"{self.tolerance:.0%}, the default's kept)"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the run, the tolerance, every prediction (ms), the kept pairs and the narrowed knobs."""
        return {
            "run": self.run,
            "tolerance": self.tolerance,
            "predicted": [{"intra_threads": i, "execution_mode": m, "predicted_ms": ms} for i, m, ms in self.predicted],
            "kept": [{"intra_threads": i, "execution_mode": m} for i, m in self.kept],
            "default": {"intra_threads": self.default[0], "execution_mode": self.default[1]},
            "knobs": {k: list(v) for k, v in self.knobs.items()},
        }


def check_tolerance(tolerance: float) -> float:
    """``tolerance`` as a float, or :class:`InvalidOption` naming the option."""
    if not (isinstance(tolerance, int | float) and math.isfinite(tolerance) and 0 <= tolerance <= 10):
        raise InvalidOption(f"--cost-model-tolerance {tolerance} must be 0 to 10 (a fraction of the predicted best)")
    return float(tolerance)


def check_cost_model(run: str | Path, engine: str) -> Any:
    """The latency oracle ``run`` names (``builtin``, an oracle folder or a logmse GST run), loaded once; refused
    before anything is measured or written when it cannot predict milliseconds or the engine serves no ONNX Runtime
    session (the simulator); on Ray Serve it narrows each replica's session options."""
    # deferred: imports torch
    from mlsysopt.costmodel.oracle.api import load_oracle

    if engine not in ("real", "rayserve"):
        raise InvalidOption(
            f"--cost-model {run}: it predicts ONNX Runtime sessions, for --engine real or rayserve (not {engine})"
        )
    try:
        return load_oracle(run)
    except MlsysoptError as exc:  # the loader names the file (or its own option, --run): the user typed --cost-model
        text = " ".join(str(exc).split())
        for prefix in (f"--run {run}: ", f"--latency-model {run}: ", f"{run}: "):
            if text.startswith(prefix):
                text = text[len(prefix) :]
                break
        raise InvalidOption(f"--cost-model {run}: {text}") from None


def op_label(intra_threads: int, execution_mode: int) -> str:
    """An op-level setting as a configuration label prints it: ``i2 seq``, ``i1 par``."""
    return f"i{intra_threads} {'par' if execution_mode else 'seq'}"


def op_level_shortlist(
    oracle: Any, onnx_path: str | Path, space: Space, cores: int, tolerance: float = DEFAULT_TOLERANCE
) -> OpLevelShortlist:
    """Predict every op-level setting of ``space`` for ``onnx_path`` with ``oracle`` (a run folder, or the
    :class:`~mlsysopt.costmodel.latency.LatencyModel` :func:`check_cost_model` loaded) and keep those within
    ``tolerance`` of the best, plus the default's (``space.default(cores)``)."""
    # deferred: imports torch
    from mlsysopt.costmodel.oracle.api import load_oracle

    tolerance = check_tolerance(tolerance)
    if not hasattr(oracle, "session_ms"):
        oracle = load_oracle(oracle)
    run = oracle.run
    pairs = sorted({(c.intra_threads, c.execution_mode) for c in space.configs()})
    try:
        ms = [float(t) for t in oracle.session_ms(onnx_path, pairs)]
    except MlsysoptError:
        raise
    except Exception as exc:  # an op or shape the cost model's features cannot read: refused, not a traceback
        why = f"{type(exc).__name__}: {exc}"
        raise InvalidOption(f"--cost-model {run}: it cannot predict {onnx_path} ({why})") from None
    if not all(math.isfinite(t) and t > 0 for t in ms):
        raise InvalidOption(f"--cost-model {run}: it predicts {ms} ms for {onnx_path}, not positive times")
    ranked = sorted(zip(pairs, ms, strict=True), key=lambda pm: (pm[1], pm[0]))
    best = ranked[0][1]
    d = space.default(cores)
    default = (d.intra_threads, d.execution_mode)
    kept = {p for p, t in ranked if t <= best * (1 + tolerance)} | {default}
    return OpLevelShortlist(
        run=str(run),
        tolerance=tolerance,
        predicted=tuple((i, m, t) for (i, m), t in ranked),
        kept=tuple(sorted(kept)),
        default=default,
    )


# ---------------------------------------------------------------------------- predictions as history records
#: ``extra.source`` of the history records :func:`serving_prior` gives.
SOURCE = "costmodel prediction"


def serving_prior(run: str | Path, onnx_path: str | Path, space: Any, workload: Any) -> list[dict[str, Any]]:
    """Predicted service times of ``onnx_path`` for the op-level configurations of a serving ``space``, as
    ``Measurement.to_dict()`` records under ``workload`` (mean = p50 = p95 = p99 = the predicted time)."""
    from mlsysopt.costmodel.oracle.api import load_oracle  # deferred: mlsysopt.costmodel.oracle.api imports torch

    configs = [c for c in space.configs() if c.instances == min(space.values["instances"]) and c.max_batch == 1]
    if not configs:
        raise InvalidOption("the serving space has no configuration with max_batch 1 and its fewest instances: the "
                            "cost-model prior covers op-level knobs at the smallest request-level setting")  # fmt: skip
    oracle = load_oracle(run)
    ms = oracle.session_ms(onnx_path, [(c.intra_threads, c.execution_mode) for c in configs])
    records = []
    for cfg, t in zip(configs, ms, strict=True):
        m = Measurement(config=cfg, workload=workload, mean_ms=float(t), p50_ms=float(t), p95_ms=float(t),
                        p99_ms=float(t), throughput=min(workload.rate, 1000.0 / float(t)), violation_rate=None,
                        mean_queue=0.0, max_queue=0, n_requests=0, completed=0, dropped=0, saturated=False,
                        wall_s=0.0, offered_rps=math.nan, windows=0, stable=None,
                        extra={"source": SOURCE, "run": str(run), "model": str(onnx_path)})  # fmt: skip
        records.append(m.to_dict())
    return records
