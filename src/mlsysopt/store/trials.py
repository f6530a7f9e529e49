"""One stored trial (:class:`TrialRecord`) and the batched writer that puts many in a study in one transaction.

A trial is what a system measured once: its parameters (an architecture's choices, a serving configuration, a
placement method and seed), its objective value(s), the flat figures a dashboard shows as user attributes, the
per-step intermediate values of a training, and the *history record*: the dict exactly as the run folder's
``result.json`` writes it, which warm starts read back (``user_attrs["record"]``).

:func:`write_batch` writes a batch of trials in one transaction, straight into Optuna's tables (the schema
revisions in :data:`~mlsysopt.store.schema.OPTUNA_SCHEMAS`), the way Optuna's ``RDBStorage.create_new_trial`` does
for one trial: the study's row is locked first (``SELECT ... FOR UPDATE`` on PostgreSQL, the write lock on SQLite),
so concurrent writers get consecutive trial numbers; trials whose ``key`` is already in the study are skipped in
the same transaction, so a retried writer (a Ray task re-run after its worker died) never doubles a trial. A
killed writer's transaction is rolled back by the database: a trial is stored whole or not at all. Writing 100
trials this way costs about as much as 2 of Optuna's one-trial calls; the result reads back through Optuna's API
identically (tests/store/test_trials.py checks it).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import StoreError
from mlsysopt.io.jsonio import to_jsonable

if TYPE_CHECKING:
    import sqlalchemy as sa
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

STATES = {"complete": "COMPLETE", "fail": "FAIL", "pruned": "PRUNED", "running": "RUNNING"}
KEY_ATTR, RECORD_ATTR = "key", "record"
MAX_NAME = 512  # Optuna's longest indexed string (parameter and attribute names)


def utc_now() -> dt.datetime:
    """Now as naive UTC: how Optuna's RDB storage keeps trial times."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


def dumps_attr(value: Any) -> str:
    """An attribute value as strict JSON (NaN and inf as null: optuna-dashboard parses it in a browser)."""
    return json.dumps(to_jsonable(value), allow_nan=False)


@dataclass
class TrialRecord:
    """One trial to store.

    Args:
        params: parameter name -> value. Numbers and bools become Optuna parameters (an int an
            ``IntDistribution``, a float a ``FloatDistribution``, both spanning the value, a bool a categorical);
            other values (strings, lists) go to the user attributes as ``param.NAME`` unless ``distributions``
            gives them one.
        values: the objective value(s); None for a trial without (failed, running). A NaN value makes the trial
            ``fail``, as Optuna's ``tell`` does.
        state: ``complete`` | ``fail`` | ``pruned`` | ``running``.
        record: the history record (the dict exactly as result.json writes it), for warm starts.
        attrs: flat figures shown by the dashboard (user attributes).
        intermediate: step -> value (a training's per-epoch metric).
        key: identifies the trial within its study (e.g. the evaluation's index): a trial whose key is stored already
            is not written again.
        distributions: Optuna distributions for some parameters (e.g. a categorical with every choice).
    """

    params: dict[str, Any] = field(default_factory=dict)
    values: list[float] | None = None
    state: str = "complete"
    record: dict[str, Any] | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    intermediate: dict[int, float] = field(default_factory=dict)
    key: str | None = None
    distributions: dict[str, BaseDistribution] = field(default_factory=dict)
    started: dt.datetime | None = None
    finished: dt.datetime | None = None

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise StoreError(f"trial state '{self.state}' is not one of {', '.join(STATES)}")
        if self.values is not None:
            self.values = [float(v) for v in self.values]
            if any(math.isnan(v) for v in self.values):
                self.values, self.state = None, "fail" if self.state == "complete" else self.state
        if self.state == "complete" and self.values is None:
            self.state = "fail"
        now = utc_now()
        self.started = self.started or now
        if self.state != "running":
            self.finished = self.finished or now
        for name in (*self.params, *self.attrs):
            if len(str(name)) > MAX_NAME - 8:
                raise StoreError(f"trial parameter or attribute name '{str(name)[:60]}...' is too long")

    def split(self) -> tuple[dict[str, Any], dict[str, BaseDistribution], dict[str, Any]]:
        """(Optuna params, their distributions, user attributes): what the trial's tables hold."""
        # deferred: Optuna loads only when a trial's distributions are built
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        params, dists = {}, {}
        attrs = {str(k): v for k, v in self.attrs.items()}
        for name, v in self.params.items():
            name = str(name)
            if name in self.distributions:
                params[name], dists[name] = v, self.distributions[name]
            elif isinstance(v, bool):
                params[name], dists[name] = v, CategoricalDistribution((False, True))
            elif isinstance(v, int):
                params[name], dists[name] = int(v), IntDistribution(int(v), int(v))
            elif isinstance(v, float) and math.isfinite(v):
                params[name], dists[name] = float(v), FloatDistribution(float(v), float(v))
            else:
                attrs[f"param.{name}"] = v
        if self.record is not None:
            attrs[RECORD_ATTR] = self.record
        if self.key is not None:
            attrs[KEY_ATTR] = str(self.key)
        return params, dists, attrs

    def frozen(self) -> FrozenTrial:
        """The trial as Optuna's ``FrozenTrial`` (for Optuna's one-trial API)."""
        from optuna.trial import FrozenTrial, TrialState  # deferred: Optuna loads only when a trial is read

        params, dists, attrs = self.split()
        local = _local
        values = self.values
        return FrozenTrial(
            number=0,
            state=TrialState[STATES[self.state]],
            value=None,
            values=values,
            datetime_start=local(self.started),
            datetime_complete=local(self.finished),
            params=params,
            distributions=dists,
            user_attrs=json.loads(json.dumps(to_jsonable(attrs))),
            system_attrs={},
            intermediate_values={int(k): float(v) for k, v in self.intermediate.items()},
            trial_id=0,
        )


def _local(t: dt.datetime | None) -> dt.datetime | None:
    """A naive-UTC time as the naive local time Optuna's API takes."""
    return None if t is None else t.replace(tzinfo=dt.UTC).astimezone().replace(tzinfo=None)


def _value_repr(v: float, nan: bool = False) -> tuple[float | None, str]:
    if nan and math.isnan(v):
        return None, "NAN"
    if v == math.inf:
        return None, "INF_POS"
    if v == -math.inf:
        return None, "INF_NEG"
    return v, "FINITE"


def lock_study(conn: sa.Connection, tables: dict[str, sa.Table], study_id: int) -> None:
    """Take the study's row lock for the transaction (what Optuna takes before numbering a new trial)."""
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    studies = tables["studies"]
    if conn.dialect.name == "sqlite":  # a write starts the transaction and takes SQLite's (database-wide) lock
        done = conn.execute(
            sa.update(studies).where(studies.c.study_id == study_id).values(study_name=studies.c.study_name)
        ).rowcount
    else:
        done = len(conn.execute(sa.select(studies.c.study_id).where(studies.c.study_id == study_id)
                                .with_for_update()).all())  # fmt: skip
    if not done:
        raise StoreError(f"study {study_id} is no longer in the store (was it deleted?)")


def stored_keys(conn: sa.Connection, tables: dict[str, sa.Table], study_id: int, keys: list[str]) -> set[str]:
    """Which of ``keys`` the study holds already."""
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    trials, tua = tables["trials"], tables["trial_user_attributes"]
    found: set[str] = set()
    wanted = [json.dumps(k) for k in keys]
    for lo in range(0, len(wanted), 500):
        q = (
            sa.select(tua.c.value_json)
            .join(trials, trials.c.trial_id == tua.c.trial_id)
            .where(trials.c.study_id == study_id, tua.c.key == KEY_ATTR, tua.c.value_json.in_(wanted[lo : lo + 500]))
        )
        found |= {json.loads(r[0]) for r in conn.execute(q)}
    return found


def param_kinds(conn: sa.Connection, tables: dict[str, sa.Table], study_id: int) -> dict[str, BaseDistribution]:
    """One stored distribution per parameter name of the study (what new trials must be compatible with)."""
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query
    from optuna.distributions import json_to_distribution  # deferred: Optuna loads only when a trial is read

    trials, tp = tables["trials"], tables["trial_params"]
    q = (
        sa.select(tp.c.param_name, sa.func.min(tp.c.distribution_json))
        .join(trials, trials.c.trial_id == tp.c.trial_id)
        .where(trials.c.study_id == study_id)
        .group_by(tp.c.param_name)
    )
    return {name: json_to_distribution(d) for name, d in conn.execute(q)}


def write_batch(
    conn: sa.Connection,
    tables: dict[str, sa.Table],
    study_id: int,
    batch: list[TrialRecord],
    kinds: dict[str, BaseDistribution],
) -> list[int]:
    """Write ``batch`` into the study in the caller's transaction; returns the numbers of the trials written.

    ``kinds`` (updated) holds a distribution per parameter name already in the study; a trial whose parameter is
    of another kind (an int where floats were stored) is refused, as Optuna refuses it.
    """
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    # deferred: Optuna loads only when a trial is written
    from optuna.distributions import check_distribution_compatibility, distribution_to_json

    lock_study(conn, tables, study_id)
    keyed = [t.key for t in batch if t.key is not None]
    if keyed:
        have = stored_keys(conn, tables, study_id, [str(k) for k in keyed])
        seen: set[str] = set()
        todo = []
        for t in batch:
            k = None if t.key is None else str(t.key)
            if k is None or (k not in have and k not in seen):
                todo.append(t)
                if k is not None:
                    seen.add(k)
        batch = todo
    if not batch:
        return []
    trials = tables["trials"]
    first = conn.execute(sa.select(sa.func.count()).select_from(trials).where(trials.c.study_id == study_id)).scalar()
    parts = [t.split() for t in batch]
    if any(name not in kinds for _, dists, _ in parts for name in dists):
        kinds.update({k: v for k, v in param_kinds(conn, tables, study_id).items() if k not in kinds})
    for _, dists, _ in parts:
        for name, d in dists.items():
            if name in kinds:
                try:
                    check_distribution_compatibility(kinds[name], d)
                except ValueError as exc:
                    raise StoreError(
                        f"trial parameter '{name}': {exc} (the study stored it as {kinds[name]})"
                    ) from None
            else:
                kinds[name] = d
    rows = [
        {"number": int(first) + i, "study_id": study_id, "state": STATES[t.state], "datetime_start": t.started,
         "datetime_complete": t.finished}
        for i, t in enumerate(batch)
    ]  # fmt: skip
    ids = [r[0] for r in conn.execute(
        sa.insert(trials).returning(trials.c.trial_id, sort_by_parameter_order=True), rows)]  # fmt: skip
    p_rows, v_rows, a_rows, i_rows = [], [], [], []
    for tid, t, (params, dists, attrs) in zip(ids, batch, parts, strict=True):
        for name, v in params.items():
            d = dists[name]
            p_rows.append({"trial_id": tid, "param_name": name, "param_value": d.to_internal_repr(v),
                           "distribution_json": distribution_to_json(d)})  # fmt: skip
        for k, v in enumerate(t.values or []):
            value, kind = _value_repr(v)
            v_rows.append({"trial_id": tid, "objective": k, "value": value, "value_type": kind})
        for key, v in attrs.items():
            a_rows.append({"trial_id": tid, "key": key, "value_json": dumps_attr(v)})
        for step, v in t.intermediate.items():
            value, kind = _value_repr(float(v), nan=True)
            i_rows.append({"trial_id": tid, "step": int(step), "intermediate_value": value,
                           "intermediate_value_type": kind})  # fmt: skip
    for name, rows_of in (("trial_params", p_rows), ("trial_values", v_rows), ("trial_user_attributes", a_rows),
                          ("trial_intermediate_values", i_rows)):  # fmt: skip
        if rows_of:
            conn.execute(sa.insert(tables[name]), rows_of)
    return [int(first) + i for i in range(len(batch))]
