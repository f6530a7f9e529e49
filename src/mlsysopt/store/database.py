"""The study store: Optuna's RDB schema on SQLite or PostgreSQL, plus mlsysopt's schema version and checkpoints.

:meth:`Store.probe` checks a spec without writing anything (the file system for SQLite, a connection for
PostgreSQL, the schema versions of an existing store); :meth:`Store.open` creates what is missing
(:mod:`mlsysopt.store.engine`); a worker writing trials uses :meth:`Store.connect`. Studies, attributes, trials and
checkpoint copies are written here, in a few statements each, and read by the mixin
:class:`~mlsysopt.store.reads.StoreReads`; Optuna's ``RDBStorage`` (:attr:`Store.storage`) serves what only Optuna's
API does (reading trials back, updating a running trial). Every database error leaves as one
:class:`~mlsysopt.errors.StoreError` naming the store.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import MlsysoptError, StoreError
from mlsysopt.store.engine import (
    check_optuna_schema,
    create_sqlite,
    db_error,
    engine_kwargs,
    pg_schema_lock,
    probe,
    quiet_optuna,
    revision,
)
from mlsysopt.store.reads import StoreReads
from mlsysopt.store.schema import (
    OPTUNA_SCHEMAS,
    check_schema_version,
    ensure_own_tables,
    own_tables,
    read_schema_version,
    reflect_optuna,
)
from mlsysopt.store.trials import TrialRecord, dumps_attr, write_batch
from mlsysopt.store.url import StorageSpec

if TYPE_CHECKING:
    import sqlalchemy as sa
    from optuna.distributions import BaseDistribution
    from optuna.storages import RDBStorage

_CACHE: OrderedDict[tuple[int, str], Store] = OrderedDict()
_CACHE_SIZE = 4
_LOCK = threading.Lock()
_TABLES: dict[tuple[str, str], dict[str, Any]] = {}


class Store(StoreReads):
    """An open study store (use :meth:`open`: one per URL and process).

    Args:
        spec: where it is.
        storage: Optuna's RDB storage on it.
    """

    def __init__(self, spec: StorageSpec, engine: sa.Engine, storage: RDBStorage | None = None) -> None:
        self.spec = spec
        self.engine = engine
        self._storage = storage
        self._tables: dict[str, sa.Table] | None = None
        self.revision = revision(engine)
        self.batched = self.revision in OPTUNA_SCHEMAS
        _, self.meta_table, self.checkpoint_table = own_tables()

    @property
    def storage(self) -> RDBStorage:
        """Optuna's RDB storage on the store (made on first use by a store opened with :meth:`connect`)."""
        if self._storage is None:
            from optuna.storages import RDBStorage  # deferred: Optuna loads only when a study storage is opened

            quiet_optuna()
            self._storage = self.call(
                lambda: RDBStorage(
                    self.spec.url, engine_kwargs(self.spec), skip_compatibility_check=True, skip_table_creation=True
                ),
                doing="opening it",
            )
        return self._storage

    # ------------------------------------------------------------------------ opening
    #: Check a spec without writing anything; returns whether the store exists (:func:`~mlsysopt.store.engine.probe`).
    probe = staticmethod(probe)

    @classmethod
    def open(cls, spec: StorageSpec) -> Store:
        """The store at ``spec``, created when missing (cached per process and URL)."""
        return cls._cached(spec, cls._open)

    @classmethod
    def connect(cls, spec: StorageSpec) -> Store:
        """An existing store, for a worker that writes trials: only SQLAlchemy, no Optuna storage or migration
        machinery (a fresh process is writing in ~1 s instead of ~2.5 s). Falls back to :meth:`open` for an Optuna
        schema the batched writer does not know."""
        store = cls._cached(spec, cls._connect)
        return store if store.batched else cls.open(spec)

    @classmethod
    def _cached(cls, spec: StorageSpec, make: Any) -> Store:
        key = (os.getpid(), spec.url)
        with _LOCK:
            if key in _CACHE:
                _CACHE.move_to_end(key)
                return _CACHE[key]
        store = make(spec)
        with _LOCK:
            _CACHE[key] = store
            while len(_CACHE) > _CACHE_SIZE:
                _, old = _CACHE.popitem(last=False)
                old.close()
        return store

    @classmethod
    def _open(cls, spec: StorageSpec) -> Store:
        """Create what is missing; a store of the Optuna schema this writer knows opens with SQLAlchemy alone
        (no Optuna migration machinery: ~1.5 s less per command), any other through Optuna's own checks."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

        if spec.kind == "none":
            raise StoreError("the study store is off (--storage none)")
        exists = cls.probe(spec, must_have_parent=False)
        try:
            if spec.kind == "sqlite" and not exists:
                try:
                    create_sqlite(spec.path)  # type: ignore[arg-type]
                except OSError as exc:
                    raise StoreError(f"cannot create it: {exc.strerror or exc}") from None
            engine = sa.create_engine(spec.url, **engine_kwargs(spec))
            if revision(engine) in OPTUNA_SCHEMAS:
                with engine.begin() as conn:
                    ensure_own_tables(conn)
                return cls(spec, engine)
            engine.dispose()
            from optuna.storages import RDBStorage  # deferred: Optuna loads only when a study storage is opened

            quiet_optuna()
            with pg_schema_lock(spec) if spec.kind == "postgresql" else contextlib.nullcontext():
                storage = RDBStorage(spec.url, engine_kwargs(spec), skip_compatibility_check=True)
                check_optuna_schema(storage)
                with storage.engine.begin() as conn:
                    ensure_own_tables(conn)
        except MlsysoptError as exc:
            raise StoreError(f"{spec.where()}: {exc}") from None
        except RuntimeError as exc:  # Optuna: the tables were set up by an incompatible Optuna
            raise StoreError(f"{spec.where()}: {' '.join(str(exc).split())}") from None
        except (sa.exc.SQLAlchemyError, sqlite3.Error, OSError) as exc:
            raise db_error(spec, exc, "opening it") from None
        return cls(spec, storage.engine, storage)

    @classmethod
    def _connect(cls, spec: StorageSpec) -> Store:
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

        if spec.kind == "none":
            raise StoreError("the study store is off (--storage none)")
        if not cls.probe(spec, must_have_parent=False):
            raise StoreError(f"{spec.where()}: no study store there (the run that owns the study creates it)")
        try:
            engine = sa.create_engine(spec.url, **engine_kwargs(spec))
            with engine.connect() as conn:
                version = read_schema_version(conn)
            check_schema_version(version)
            return cls(spec, engine)
        except MlsysoptError as exc:
            raise StoreError(f"{spec.where()}: {exc}") from None
        except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
            raise db_error(spec, exc, "opening it") from None

    def close(self) -> None:
        """Release the store's connections."""
        self.engine.dispose()

    @property
    def tables(self) -> dict[str, sa.Table]:
        """Optuna's tables (reflected once per process and database kind: every store of a kind has the same)."""
        if self._tables is None:
            key = (self.engine.dialect.name, str(self.revision))
            if key not in _TABLES:
                _TABLES[key] = reflect_optuna(self.engine)
            self._tables = _TABLES[key]
        return self._tables

    @contextlib.contextmanager
    def transaction(self, doing: str = "") -> Iterator[sa.Connection]:
        """A write transaction; database errors leave as one StoreError."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

        try:
            with self.engine.begin() as conn:
                yield conn
        except MlsysoptError:
            raise
        except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
            raise db_error(self.spec, exc, doing) from None

    def call(self, fn: Any, *args: Any, doing: str = "") -> Any:
        """Run an Optuna storage method; its database errors leave as one StoreError."""
        import optuna  # deferred: Optuna loads only when a study storage is opened
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

        try:
            return fn(*args)
        except (sa.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError, sqlite3.Error) as exc:
            raise db_error(self.spec, exc, doing) from None

    # ------------------------------------------------------------------------ studies
    def create_study(self, name: str, direction: str, attrs: dict[str, Any]) -> tuple[int, str]:
        """A new study named ``name`` (``name-2``, ``name-3``, ... when taken) with ``attrs``; (id, name).

        One transaction per attempt, as Optuna's ``create_new_study`` writes it (the study, its direction), plus
        the attributes; a name another writer takes at the same moment makes the attempt fail and the next run.
        """
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

        studies, dirs = self.tables["studies"], self.tables["study_directions"]
        attr_t = self.tables["study_user_attributes"]
        taken = set(self.study_names().values())
        for n in range(1, 10_000):
            candidate = name if n == 1 else f"{name}-{n}"
            if candidate in taken:
                continue
            try:
                with self.engine.begin() as conn:
                    sid = conn.execute(sa.insert(studies).values(study_name=candidate)
                                       .returning(studies.c.study_id)).scalar_one()  # fmt: skip
                    conn.execute(sa.insert(dirs), {"direction": direction.upper(), "study_id": sid, "objective": 0})
                    if attrs:
                        conn.execute(sa.insert(attr_t), [{"study_id": sid, "key": k, "value_json": dumps_attr(v)}
                                                         for k, v in attrs.items()])  # fmt: skip
                return int(sid), candidate
            except sa.exc.IntegrityError:
                continue  # taken meanwhile
            except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
                raise db_error(self.spec, exc, "creating a study") from None
        raise StoreError(f"{self.spec.where()}: 10,000 studies are named after '{name}' already")

    def set_objective(self, study_id: int, direction: str, name: str | None = None) -> None:
        """A single-objective study's direction and, when given, its metric name (as ``study.set_metric_names``)."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

        t = self.tables["study_directions"]
        with self.transaction("setting the study's direction") as conn:
            conn.execute(sa.update(t).where(t.c.study_id == study_id).values(direction=direction.upper()))
        if name:
            self.call(self.storage.set_study_system_attr, study_id, "study:metric_names", [str(name)],
                      doing="naming the study's objective")  # fmt: skip

    def set_study_attrs(self, study_id: int, attrs: dict[str, Any]) -> None:
        """Set (or replace) study user attributes, all in one transaction."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

        if not attrs:
            return
        t = self.tables["study_user_attributes"]
        with self.transaction("setting study attributes") as conn:
            conn.execute(sa.delete(t).where(t.c.study_id == study_id, t.c.key.in_(list(attrs))))
            conn.execute(sa.insert(t), [{"study_id": study_id, "key": k, "value_json": dumps_attr(v)}
                                        for k, v in attrs.items()])  # fmt: skip

    def delete_study(self, study_id: int) -> None:
        """Remove a study, its trials and its checkpoint."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

        with self.transaction("removing a study") as conn:
            conn.execute(sa.delete(self.checkpoint_table).where(self.checkpoint_table.c.study_id == study_id))
        self.call(self.storage.delete_study, study_id, doing="removing a study")

    # ------------------------------------------------------------------------ trials
    def write_trials(self, study_id: int, batch: list[TrialRecord], kinds: dict[str, BaseDistribution]) -> list[int]:
        """Write a batch of trials (one transaction when the schema allows); returns the new trials' numbers."""
        if not batch:
            return []
        if self.batched:
            with self.transaction(f"writing {len(batch)} trial(s)") as conn:
                return write_batch(conn, self.tables, study_id, batch, kinds)
        numbers = []
        for t in batch:  # an Optuna schema the batched writer does not know: Optuna's own API, trial by trial
            tid = self.call(self.storage.create_new_trial, study_id, t.frozen(), doing="writing a trial")
            numbers.append(self.storage.get_trial_number_from_id(tid))
        return numbers

    # ------------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, study_id: int, name: str, data: bytes) -> None:
        """Keep ``data`` as the study's checkpoint (replacing the previous one)."""
        import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

        t = self.checkpoint_table
        with self.transaction("mirroring the checkpoint") as conn:
            conn.execute(sa.delete(t).where(t.c.study_id == study_id))
            conn.execute(sa.insert(t), {"study_id": study_id, "name": name, "data": data, "size": len(data),
                                        "saved_at": time.time()})  # fmt: skip


def _forget_in_child() -> None:
    """A forked child must not use its parent's connections: drop them (without closing the parent's)."""
    global _CACHE, _LOCK
    _LOCK = threading.Lock()
    for store in _CACHE.values():
        with contextlib.suppress(Exception):
            store.engine.dispose(close=False)
    _CACHE = OrderedDict()


def forget(spec: StorageSpec) -> None:
    """Close and drop this process's cached store of ``spec`` (before its file is removed)."""
    with _LOCK:
        store = _CACHE.pop((os.getpid(), spec.url), None)
    if store is not None:
        store.close()


os.register_at_fork(after_in_child=_forget_in_child)
