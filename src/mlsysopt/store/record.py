"""The one call a system's experiment layer records a trial with: :func:`record_trial`, into the study of the
innermost open run (:func:`~mlsysopt.store.session.current_run`; nothing happens when no run is open or the store
is off). The run's link to its study is :class:`~mlsysopt.store.run.RunStore`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlsysopt.store.session import current_run
from mlsysopt.store.trials import TrialRecord

if TYPE_CHECKING:
    from mlsysopt.store.run import RunStore


def record_trial(
    params: dict[str, Any] | None = None,
    value: float | None = None,
    *,
    values: list[float] | None = None,
    state: str = "complete",
    record: dict[str, Any] | None = None,
    attrs: dict[str, Any] | None = None,
    intermediate: dict[int, float] | None = None,
    key: str | int | None = None,
    distributions: dict[str, Any] | None = None,
    direction: str | None = None,
    live: bool = False,
    run: RunStore | None = None,
) -> bool:
    """Record one trial in the study of the innermost open run (see :class:`~mlsysopt.store.TrialRecord`).

    ``direction`` (``minimize``/``maximize``) is the study's, when this trial is the one that creates it; ``live``
    updates the running trial of ``key`` (a training's new epochs) instead of adding one; ``run`` is the run to
    record in (default: the innermost open one). Returns whether a store took it (False: no run is open, or the
    store is off).

    Args:
        params: Parameter name -> value (see :class:`~mlsysopt.store.TrialRecord`).
        value: The single objective value; ignored when ``values`` is given.
        values: The objective values of a multi-objective trial.
        state: ``complete``, ``fail``, ``pruned`` or ``running``.
        record: The history record (the dict as ``result.json`` writes it), for warm starts.
        attrs: Flat figures the dashboard shows (user attributes).
        intermediate: Step -> value (a training's per-epoch metric).
        key: Identifies the trial in its study; a key stored already is not written again.
        distributions: Optuna distributions for some parameters.
        direction: ``minimize`` or ``maximize``: the study's, when this trial creates it.
        live: Update the running trial of ``key`` instead of adding one.
        run: The run to record in (default: the innermost open one).

    Returns:
        Whether a store took the trial. A failing store does not raise: it warns once and stops the store for
        the run.

    Raises:
        StoreError: If a run is open and ``state`` is unknown or a parameter or attribute name is too long.
    """
    run = run if run is not None else current_run()
    if run is None:
        return False
    vals = values if values is not None else (None if value is None else [value])
    trial = TrialRecord(dict(params or {}), vals, state, record, dict(attrs or {}), dict(intermediate or {}),
                        None if key is None else str(key), dict(distributions or {}))  # fmt: skip
    return run.record(trial, direction, live)
