"""Warm-start a NAS search from the study store's earlier runs (``nas search --warm-start``).

The records come from :func:`mlsysopt.store.history.read_histories`; the searcher's own ``warm_start(histories)``
learns from them when it has one (the transfer priors plug in there), else a method's performance predictor (EPNAS,
PNAS) is pretrained on the records' architectures that fit the space.
"""

from __future__ import annotations

import math
from typing import Any

from mlsysopt.errors import MlsysoptError, StoreError
from mlsysopt.nas.spaces.base import Arch
from mlsysopt.store.history import describe, previous_warm_start, read_histories


def warm_start_search(job: Any, spec: str | None) -> str | None:
    """Pretrain a prepared NAS search (:class:`~mlsysopt.nas.experiment.SearchJob`) on earlier evaluations.

    Returns a line saying what was used (None without a warm start); the run's settings record it
    (``warm_start``). On ``--resume`` the checkpoint holds the predictor's data, the prior's included.
    """
    before = previous_warm_start(job.run_dir, spec)
    if before is not None:
        job.run_dir.settings["warm_start"] = before
        return f"warm start from {', '.join(before['studies'])} (kept in the checkpoint)"
    if spec is None:
        return None
    searcher = job.searcher
    own = getattr(searcher, "warm_start", None)
    predictor = getattr(searcher, "predictor", None)
    if own is None and predictor is None:
        raise StoreError(f"--warm-start: method '{searcher.name}' learns no predictor to pretrain (use epnas or pnas)")
    histories = read_histories(spec, "nas", job.run_dir.path)
    if own is not None:
        used = int(own(histories))
    else:
        used = 0
        for h in histories:
            for rec in h["records"]:
                arch = rec.get("arch") or {}
                perf = rec.get("perf")
                if not rec.get("ok", True) or not isinstance(perf, (int, float)) or not math.isfinite(perf):
                    continue
                try:
                    a = Arch(tuple(int(c) for c in arch.get("choices", ())), int(arch.get("blocks", 0)))
                    job.space.check(a)
                except (MlsysoptError, ValueError, TypeError):  # an architecture of another space: skip it
                    continue
                predictor.add(a, float(perf))
                used += 1
        if used == 0:
            raise StoreError(f"--warm-start {spec}: none of its evaluations is an architecture of {job.space.name}")
        predictor.refit()
    job.run_dir.settings["warm_start"] = {"spec": spec, **describe(histories, used)}
    return f"warm start: predictor pretrained on {used} evaluations of {', '.join(h['study'] for h in histories)}"
