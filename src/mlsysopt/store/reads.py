"""The read side of the study store: studies and their attributes, trial counts, trials (streamed a page at a time),
the best trials and the checkpoint copy, each in one or a few queries.

:class:`StoreReads` is a mixin of :class:`~mlsysopt.store.database.Store`, which supplies the connection (``tables``,
``transaction``, ``call``, ``storage``, ``spec``, ``checkpoint_table``); every database error leaves as one
:class:`~mlsysopt.errors.StoreError` naming the store.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from mlsysopt.store.engine import db_error
from mlsysopt.store.trials import KEY_ATTR, dumps_attr

if TYPE_CHECKING:
    import sqlalchemy as sa
    from optuna.storages import RDBStorage

    from mlsysopt.store.url import StorageSpec

#: Trials read per query when a study is streamed (:meth:`StoreReads.iter_trials`): a few MB of records at most.
TRIAL_PAGE = 200


class StoreReads:
    """Queries of an open store (a mixin: :class:`~mlsysopt.store.database.Store` supplies the connection)."""

    spec: StorageSpec
    storage: RDBStorage
    tables: dict[str, sa.Table]
    checkpoint_table: sa.Table
    #: a transaction on the store, database errors leaving as one StoreError (``Store.transaction``)
    transaction: Callable[..., contextlib.AbstractContextManager[sa.Connection]]
    #: an Optuna storage call, database errors leaving as one StoreError (``Store.call``)
    call: Callable[..., Any]

    def study_attrs(self, study_id: int) -> dict[str, Any]:
        """A study's user attributes."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query, not with the CLI

        t = self.tables["study_user_attributes"]
        with self.transaction("reading a study") as conn:
            rows = conn.execute(sa.select(t.c.key, t.c.value_json).where(t.c.study_id == study_id))
            return {k: json.loads(v) for k, v in rows}

    def study_ids(self, key: str, value: Any) -> list[int]:
        """Ids of the studies whose user attribute ``key`` is ``value``, oldest first."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query, not with the CLI

        t = self.tables["study_user_attributes"]
        q = sa.select(t.c.study_id).where(t.c.key == key, t.c.value_json == dumps_attr(value)).order_by(t.c.study_id)
        with self.transaction("looking up studies") as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def all_study_attrs(self, prefix: str = "") -> dict[int, dict[str, Any]]:
        """Every study's user attributes whose key starts with ``prefix``, by study id (one query)."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query, not with the CLI

        t = self.tables["study_user_attributes"]
        q = sa.select(t.c.study_id, t.c.key, t.c.value_json)
        if prefix:
            q = q.where(t.c.key.startswith(prefix))
        out: dict[int, dict[str, Any]] = {}
        with self.transaction("listing studies") as conn:
            for sid, k, v in conn.execute(q):
                out.setdefault(int(sid), {})[k] = json.loads(v)
        return out

    def study_names(self) -> dict[int, str]:
        """Every study's name, by id."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query, not with the CLI

        t = self.tables["studies"]
        with self.transaction("listing studies") as conn:
            return {int(i): n for i, n in conn.execute(sa.select(t.c.study_id, t.c.study_name))}

    def trial_counts(self, study_id: int | None = None) -> dict[int, dict[str, int]]:
        """Trials per state, by study id (one query; of one study when ``study_id`` is given)."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query, not with the CLI

        t = self.tables["trials"]
        q = sa.select(t.c.study_id, t.c.state, sa.func.count()).group_by(t.c.study_id, t.c.state)
        if study_id is not None:
            q = q.where(t.c.study_id == study_id)
        out: dict[int, dict[str, int]] = {}
        with self.transaction("counting trials") as conn:
            for sid, state, n in conn.execute(q):
                out.setdefault(int(sid), {})[str(getattr(state, "name", state)).lower()] = int(n)
        return out

    def trial_ids_by_key(self, study_id: int, key: str) -> list[int]:
        """Ids of the study's trials whose key is ``key`` (oldest first)."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query, not with the CLI

        trials, tua = self.tables["trials"], self.tables["trial_user_attributes"]
        q = (
            sa.select(trials.c.trial_id)
            .join(tua, trials.c.trial_id == tua.c.trial_id)
            .where(trials.c.study_id == study_id, tua.c.key == KEY_ATTR, tua.c.value_json == json.dumps(key))
            .order_by(trials.c.trial_id)
        )
        with self.transaction("looking up a trial") as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def trials(self, study_id: int) -> list[Any]:
        """Every trial of a study as Optuna ``FrozenTrial`` objects, by number."""
        return list(self.call(self.storage.get_all_trials, study_id, False, doing="reading trials"))

    def iter_trials(self, study_id: int, page: int = TRIAL_PAGE, trial_ids: list[int] | None = None) -> Iterator[Any]:
        """A study's trials (or those of ``trial_ids``) as ``FrozenTrial`` objects by trial id, read ``page`` at a
        time: memory stays bounded by one page however many trials the study holds (``runs show``/``export``)."""
        import optuna  # deferred: Optuna and SQLAlchemy load with the first query, not with the CLI
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query
        from optuna.storages._rdb import models  # deferred: Optuna loads only when a study storage is opened
        from sqlalchemy import orm  # deferred: SQLAlchemy loads with the first query

        storage, last = self.storage, -1
        wanted = None if trial_ids is None else sorted(trial_ids)
        while True:
            session = storage.scoped_session()
            try:
                q = session.query(models.TrialModel).filter(models.TrialModel.study_id == study_id)
                if wanted is not None:
                    chunk, wanted = wanted[:page], wanted[page:]
                    if not chunk:
                        return
                    q = q.filter(models.TrialModel.trial_id.in_(chunk))
                else:
                    q = q.filter(models.TrialModel.trial_id > last)
                for rel in ("params", "values", "user_attributes", "system_attributes", "intermediate_values"):
                    q = q.options(orm.selectinload(getattr(models.TrialModel, rel)))
                rows = q.order_by(models.TrialModel.trial_id).limit(page).all()
                batch = [storage._build_frozen_trial_from_trial_model(r) for r in rows]
            except (sa.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError, sqlite3.Error) as exc:
                raise db_error(self.spec, exc, "reading trials") from None
            finally:
                session.close()
                storage.scoped_session.remove()
            if not batch and wanted is None:
                return
            yield from batch
            if batch:
                last = batch[-1]._trial_id

    def best_trial_ids(self, study_id: int, maximize: bool, n: int) -> list[int]:
        """Ids of the ``n`` trials with the best first objective value (best first), chosen by the database."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query, not with the CLI

        if n <= 0:
            return []
        trials, values = self.tables["trials"], self.tables["trial_values"]
        kind = sa.cast(values.c.value_type, sa.String)
        rank = sa.case((kind == "INF_NEG", 0), (kind == "FINITE", 1), else_=2)  # -inf < finite < +inf
        order = [rank.desc(), values.c.value.desc()] if maximize else [rank, values.c.value]
        q = (
            sa.select(values.c.trial_id)
            .join(trials, trials.c.trial_id == values.c.trial_id)
            .where(trials.c.study_id == study_id, values.c.objective == 0)
            .order_by(*order, values.c.trial_id)
            .limit(n)
        )
        with self.transaction("ranking trials") as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def load_checkpoint(self, study_id: int) -> tuple[str, bytes] | None:
        """The study's checkpoint as (file name, bytes), or None."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query, not with the CLI

        t = self.checkpoint_table
        with self.transaction("reading the checkpoint") as conn:
            row = conn.execute(sa.select(t.c.name, t.c.data).where(t.c.study_id == study_id)).first()
        return None if row is None else (str(row[0]), bytes(row[1]))
