"""The study store: every run's trials in an Optuna-compatible RDB storage that Optuna and optuna-dashboard read.

One study per run folder (named after it), the run's settings, system, status and headline figure as study
attributes, one trial per evaluation a search made. SQLite ``mlsysopt.db`` beside the run folders by default,
PostgreSQL for a team or a cluster, ``none`` to turn it off (``--storage URL`` or ``MLSYSOPT_STORAGE``). The run
folder stays the source of truth for results and resume; the store is the queryable copy::

    from mlsysopt.store import record_trial          # in a system's experiment layer, inside an open RunDir
    record_trial({"instances": 2, "max_batch": 8}, 12.5, record=measurement.to_dict(), key=step)

    import optuna                                     # and anyone can read it back
    study = optuna.load_study(study_name="nas1", storage="sqlite:///runs/mlsysopt.db")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsysopt.lazy import lazy_exports

_EXPORTS = {
    "StorageSpec": "mlsysopt.store.url",
    "parse_storage": "mlsysopt.store.url",
    "resolve_storage": "mlsysopt.store.url",
    "Store": "mlsysopt.store.database",
    "TrialRecord": "mlsysopt.store.trials",
    "StudyWriter": "mlsysopt.store.writer",
    "StudyHandle": "mlsysopt.store.writer",
    "RunStore": "mlsysopt.store.run",
    "record_trial": "mlsysopt.store.record",
    "use_storage": "mlsysopt.store.session",
    "storage": "mlsysopt.store.session",
    "current_run": "mlsysopt.store.session",
    "SCHEMA_VERSION": "mlsysopt.store.schema",
}

if TYPE_CHECKING:
    from mlsysopt.store.database import Store
    from mlsysopt.store.record import record_trial
    from mlsysopt.store.run import RunStore
    from mlsysopt.store.schema import SCHEMA_VERSION
    from mlsysopt.store.session import current_run, storage, use_storage
    from mlsysopt.store.trials import TrialRecord
    from mlsysopt.store.url import StorageSpec, parse_storage, resolve_storage
    from mlsysopt.store.writer import StudyHandle, StudyWriter

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
