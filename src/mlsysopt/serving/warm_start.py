"""Warm-start a serving tuning from the study store's earlier runs (``serving tune --warm-start``).

The records come from :func:`mlsysopt.store.history.read_histories`; the tuner's own ``warm_start(histories)``
learns from them (RRL: its latency estimator).
"""

from __future__ import annotations

from typing import Any

from mlsysopt.errors import StoreError
from mlsysopt.store.history import describe, previous_warm_start, read_histories


def warm_start_tuning(job: Any, spec: str | None) -> str | None:
    """Give a prepared serving tuning (:class:`~mlsysopt.serving.tuning_job.TuningJob`) earlier measurements.

    The tuner's ``warm_start(histories)`` learns from them (RRL: its latency estimator); a tuner without one is
    refused. On ``--resume`` the tuner is warm-started again from the studies the run started with (the replay of
    its checkpoint needs the same tuner). Returns a line saying what was used; the run's settings record it.
    """
    run_dir = job.run_dir
    before = previous_warm_start(run_dir, spec)
    if spec is None:
        return None
    own = getattr(job.tuner, "warm_start", None)
    if own is None:
        raise StoreError(f"--warm-start: tuner '{job.tuner_name}' takes no warm start (rrl does)")
    if before is not None:
        histories = [read_histories(name, "serving", run_dir.path)[0] for name in before["studies"]]
    else:
        histories = read_histories(spec, "serving", run_dir.path)
    used = int(own(histories))
    if used == 0:
        raise StoreError(f"--warm-start {spec}: none of its measurements is a configuration of this space")
    run_dir.settings["warm_start"] = {"spec": spec, **describe(histories, used)}
    studies = ", ".join(h["study"] for h in histories)
    return f"warm start: {job.tuner_name} learned from {used} measurements of {studies}"
