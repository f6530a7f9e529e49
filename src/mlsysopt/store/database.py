"""The study store: Optuna's ``RDBStorage`` on SQLite or PostgreSQL, plus mlsysopt's schema version and checkpoints.

:meth:`Store.probe` checks a spec without writing anything (the file system for SQLite, a connection for
PostgreSQL, the schema versions of an existing store); :meth:`Store.open` creates what is missing. A new SQLite
store is a copy of a template built once per process (Optuna's schema takes ~0.4 s to create, a copy ~1 ms), in
WAL mode with a busy timeout, so writers on this machine take turns instead of failing. Every database error
leaves as one :class:`~mlsysopt.errors.StoreError` naming the store; a SQLite file still locked by other writers
after its timeout is refused with a message pointing to PostgreSQL instead of waiting forever or corrupting.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import MlsysoptError, StoreError
from mlsysopt.store.schema import (
    OPTUNA_SCHEMAS,
    check_schema_version,
    ensure_own_tables,
    own_tables,
    read_schema_version,
    reflect_optuna,
    written_by,
)
from mlsysopt.store.trials import TrialRecord, dumps_attr, write_batch
from mlsysopt.store.url import StorageSpec, check_sqlite_path

if TYPE_CHECKING:
    import sqlalchemy as sa
    from optuna.distributions import BaseDistribution
    from optuna.storages import RDBStorage

CONNECT_TIMEOUT = 10  # seconds to reach a PostgreSQL server
_CACHE: OrderedDict[tuple[int, str], Store] = OrderedDict()
_CACHE_SIZE = 4
_LOCK = threading.Lock()
_TEMPLATE: bytes | None = None
_TABLES: dict[tuple[str, str], dict[str, Any]] = {}
_HEAD: list[str] = []  # Optuna's newest schema revision (its alembic scripts take ~0.1 s to read: once)


def _quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _sqlite_connect(path: Path, timeout: float) -> sqlite3.Connection:
    con = sqlite3.connect(str(path), timeout=timeout, check_same_thread=False)
    con.execute("PRAGMA synchronous=NORMAL")  # with WAL: durable at checkpoints, never corrupt
    return con


def engine_kwargs(spec: StorageSpec) -> dict[str, Any]:
    """``create_engine`` options of a store: a busy timeout for SQLite, a connect timeout and pings for PostgreSQL."""
    if spec.kind == "sqlite":
        path, timeout = spec.path, spec.timeout
        return {"creator": lambda: _sqlite_connect(path, timeout)}  # type: ignore[arg-type]
    return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT, "application_name": "mlsysopt"},
            "pool_pre_ping": True, "pool_size": 2, "max_overflow": 4}  # fmt: skip


def db_error(spec: StorageSpec, exc: BaseException, doing: str = "") -> StoreError:
    """One StoreError for a database error: what failed, where, and what to do."""
    cause = exc
    while getattr(cause, "__cause__", None) is not None and not hasattr(cause, "orig"):
        cause = cause.__cause__  # type: ignore[assignment]
    orig = getattr(cause, "orig", None) or cause
    text = " ".join(str(orig).split()) or type(orig).__name__
    doing = f" ({doing})" if doing else ""
    if spec.kind == "sqlite" and "locked" in text:
        return StoreError(
            f"{spec.where()}: the SQLite file stayed locked by other writers for more than {spec.timeout:g} s{doing}; "
            "SQLite takes one writer at a time, so nothing was written: use PostgreSQL for many concurrent writers "
            "(--storage postgresql://USER@HOST/DB), or fewer writers"
        )
    if spec.kind == "sqlite" and ("malformed" in text or "not a database" in text):
        return StoreError(f"{spec.where()}: the SQLite file is damaged ({text[:160]}); choose another --storage")
    if spec.kind == "postgresql" and any(
        w in text
        for w in (
            "could not connect",
            "Connection refused",
            "timeout expired",
            "could not translate host",
            "connection to server",
        )
    ):
        return StoreError(f"{spec.where()}: cannot reach the PostgreSQL server: {text[:240]}")
    return StoreError(f"{spec.where()}: {text[:240]}{doing}")


def _template() -> bytes:
    """An empty store (Optuna's tables + mlsysopt's, WAL mode) as bytes, built once per process."""
    global _TEMPLATE
    if _TEMPLATE is None:
        from optuna.storages import RDBStorage

        _quiet_optuna()
        with tempfile.TemporaryDirectory(prefix="mlsysopt-store-") as tmp:
            path = Path(tmp) / "template.db"
            con = sqlite3.connect(path)
            con.execute("PRAGMA journal_mode=WAL")
            con.close()
            storage = RDBStorage(f"sqlite:///{path}")
            with storage.engine.begin() as conn:
                ensure_own_tables(conn)
            storage.engine.dispose()
            con = sqlite3.connect(path)
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.close()
            _TEMPLATE = path.read_bytes()
    return _TEMPLATE


def _create_sqlite(path: Path) -> None:
    """Put an empty store at ``path`` unless another process just did (never clobbers an existing store)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_template())
        if path.exists() and path.stat().st_size == 0:
            os.replace(tmp, path)  # an empty file (touched by hand): take its place
        else:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


class Store:
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
        self.revision = _revision(engine)
        self.batched = self.revision in OPTUNA_SCHEMAS
        _, self.meta_table, self.checkpoint_table = own_tables()

    @property
    def storage(self) -> RDBStorage:
        """Optuna's RDB storage on the store (made on first use by a store opened with :meth:`connect`)."""
        if self._storage is None:
            from optuna.storages import RDBStorage

            _quiet_optuna()
            self._storage = self.call(
                lambda: RDBStorage(
                    self.spec.url, engine_kwargs(self.spec), skip_compatibility_check=True, skip_table_creation=True
                ),
                doing="opening it",
            )
        return self._storage

    # ------------------------------------------------------------------------ opening
    @staticmethod
    def probe(spec: StorageSpec, must_have_parent: bool = True) -> bool:
        """Check ``spec`` without writing anything; returns whether the store exists already.

        SQLite: the file-system checks of :func:`~mlsysopt.store.url.check_sqlite_path`, then (if the file exists)
        its schema versions. PostgreSQL: a connection and, if the tables exist, their schema versions.
        """
        if spec.kind == "none":
            return False
        if spec.kind == "sqlite":
            if not check_sqlite_path(spec, must_have_parent):
                return False
            url = f"file:{spec.path}?mode=ro"
            try:
                con = sqlite3.connect(url, uri=True, timeout=spec.timeout)
                try:
                    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                    meta = dict(con.execute("SELECT key, value FROM mlsysopt_meta").fetchall()) if (
                        "mlsysopt_meta" in names) else {}  # fmt: skip
                finally:
                    con.close()
            except sqlite3.Error as exc:
                raise db_error(spec, exc, "reading it") from None
            _check_meta(spec, meta)
            return True
        import sqlalchemy as sa

        engine = sa.create_engine(spec.url, poolclass=sa.pool.NullPool, **_pg_connect_args())
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
                version = read_schema_version(conn)
                by = written_by(conn)
                exists = sa.inspect(conn).has_table("studies")
        except MlsysoptError as exc:
            raise StoreError(f"{spec.where()}: {exc}") from None
        except sa.exc.SQLAlchemyError as exc:
            raise db_error(spec, exc) from None
        finally:
            engine.dispose()
        try:
            check_schema_version(version, by)
        except StoreError as exc:
            raise StoreError(f"{spec.where()}: {exc}") from None
        return exists

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
        import sqlalchemy as sa
        from optuna.storages import RDBStorage

        _quiet_optuna()
        if spec.kind == "none":
            raise StoreError("the study store is off (--storage none)")
        exists = cls.probe(spec, must_have_parent=False)
        try:
            if spec.kind == "sqlite":
                fresh = not exists
                if fresh:
                    _create_sqlite(spec.path)  # type: ignore[arg-type]
                storage = RDBStorage(spec.url, engine_kwargs(spec), skip_compatibility_check=True,
                                     skip_table_creation=fresh)  # fmt: skip
                if not fresh:
                    _check_optuna_schema(storage)
                    with storage.engine.begin() as conn:
                        ensure_own_tables(conn)
            else:
                with _pg_schema_lock(spec):
                    storage = RDBStorage(spec.url, engine_kwargs(spec), skip_compatibility_check=True)
                    _check_optuna_schema(storage)
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
        import sqlalchemy as sa

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
        import sqlalchemy as sa

        try:
            with self.engine.begin() as conn:
                yield conn
        except MlsysoptError:
            raise
        except (sa.exc.SQLAlchemyError, sqlite3.Error) as exc:
            raise db_error(self.spec, exc, doing) from None

    def call(self, fn: Any, *args: Any, doing: str = "") -> Any:
        """Run an Optuna storage method; its database errors leave as one StoreError."""
        import optuna
        import sqlalchemy as sa

        try:
            return fn(*args)
        except (sa.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError, sqlite3.Error) as exc:
            raise db_error(self.spec, exc, doing) from None

    # ------------------------------------------------------------------------ studies
    def create_study(self, name: str, direction: str, attrs: dict[str, Any]) -> tuple[int, str]:
        """A new study named ``name`` (``name-2``, ``name-3``, ... when taken) with ``attrs``; (id, name)."""
        import optuna
        from optuna.study import StudyDirection

        d = StudyDirection.MAXIMIZE if direction == "maximize" else StudyDirection.MINIMIZE
        for n in range(1, 10_000):
            candidate = name if n == 1 else f"{name}-{n}"
            try:
                sid = self.call(self.storage.create_new_study, [d], candidate, doing="creating a study")
            except optuna.exceptions.DuplicatedStudyError:
                continue
            self.set_study_attrs(sid, attrs)
            return sid, candidate
        raise StoreError(f"{self.spec.where()}: 10,000 studies are named after '{name}' already")

    def set_study_attrs(self, study_id: int, attrs: dict[str, Any]) -> None:
        """Set (or replace) study user attributes, all in one transaction."""
        import sqlalchemy as sa

        if not attrs:
            return
        t = self.tables["study_user_attributes"]
        with self.transaction("setting study attributes") as conn:
            conn.execute(sa.delete(t).where(t.c.study_id == study_id, t.c.key.in_(list(attrs))))
            conn.execute(sa.insert(t), [{"study_id": study_id, "key": k, "value_json": dumps_attr(v)}
                                        for k, v in attrs.items()])  # fmt: skip

    def study_attrs(self, study_id: int) -> dict[str, Any]:
        """A study's user attributes."""
        return dict(self.call(self.storage.get_study_user_attrs, study_id, doing="reading a study"))

    def study_ids(self, key: str, value: Any) -> list[int]:
        """Ids of the studies whose user attribute ``key`` is ``value``, oldest first."""
        import sqlalchemy as sa

        t = self.tables["study_user_attributes"]
        q = sa.select(t.c.study_id).where(t.c.key == key, t.c.value_json == dumps_attr(value)).order_by(t.c.study_id)
        with self.transaction("looking up studies") as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def all_study_attrs(self, prefix: str = "") -> dict[int, dict[str, Any]]:
        """Every study's user attributes whose key starts with ``prefix``, by study id (one query)."""
        import sqlalchemy as sa

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
        import sqlalchemy as sa

        t = self.tables["studies"]
        with self.transaction("listing studies") as conn:
            return {int(i): n for i, n in conn.execute(sa.select(t.c.study_id, t.c.study_name))}

    def trial_counts(self) -> dict[int, dict[str, int]]:
        """Trials per state, by study id (one query)."""
        import sqlalchemy as sa

        t = self.tables["trials"]
        q = sa.select(t.c.study_id, t.c.state, sa.func.count()).group_by(t.c.study_id, t.c.state)
        out: dict[int, dict[str, int]] = {}
        with self.transaction("counting trials") as conn:
            for sid, state, n in conn.execute(q):
                out.setdefault(int(sid), {})[str(getattr(state, "name", state)).lower()] = int(n)
        return out

    def delete_study(self, study_id: int) -> None:
        """Remove a study, its trials and its checkpoint."""
        import sqlalchemy as sa

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

    def trial_ids_by_key(self, study_id: int, key: str) -> list[int]:
        """Ids of the study's trials whose key is ``key`` (oldest first)."""
        import sqlalchemy as sa

        from mlsysopt.store.trials import KEY_ATTR

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

    # ------------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, study_id: int, name: str, data: bytes) -> None:
        """Keep ``data`` as the study's checkpoint (replacing the previous one)."""
        import sqlalchemy as sa

        t = self.checkpoint_table
        with self.transaction("mirroring the checkpoint") as conn:
            conn.execute(sa.delete(t).where(t.c.study_id == study_id))
            conn.execute(sa.insert(t), {"study_id": study_id, "name": name, "data": data, "size": len(data),
                                        "saved_at": time.time()})  # fmt: skip

    def load_checkpoint(self, study_id: int) -> tuple[str, bytes] | None:
        """The study's checkpoint as (file name, bytes), or None."""
        import sqlalchemy as sa

        t = self.checkpoint_table
        with self.transaction("reading the checkpoint") as conn:
            row = conn.execute(sa.select(t.c.name, t.c.data).where(t.c.study_id == study_id)).first()
        return None if row is None else (str(row[0]), bytes(row[1]))


def _revision(engine: sa.Engine) -> str | None:
    """The Optuna schema revision of the store (alembic's ``version_num``), None when it has none."""
    import sqlalchemy as sa

    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    except sa.exc.SQLAlchemyError:
        return None


def _check_optuna_schema(storage: RDBStorage) -> None:
    """Optuna's own check (its tables are of this Optuna's schema), with the newest revision read once."""
    from optuna import version

    if not _HEAD:
        _HEAD.append(storage.get_head_version())
    current = storage.get_current_version()
    if current != _HEAD[0]:
        known = current in storage.get_all_versions()
        what = "run 'optuna storage upgrade --storage URL'" if known else "upgrade optuna (pip install -U optuna)"
        raise RuntimeError(
            f"its Optuna tables are of schema {current}, this optuna {version.__version__} uses {_HEAD[0]}: {what}"
        )


def _check_meta(spec: StorageSpec, meta: dict[str, Any]) -> None:
    try:
        version = int(meta["schema_version"]) if "schema_version" in meta else None
    except ValueError:
        raise StoreError(f"{spec.where()}: not a mlsysopt store (schema_version {meta['schema_version']!r})") from None
    try:
        check_schema_version(version, meta.get("written_by"))
    except StoreError as exc:
        raise StoreError(f"{spec.where()}: {exc}") from None


def _pg_connect_args() -> dict[str, Any]:
    return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT, "application_name": "mlsysopt"}}


@contextlib.contextmanager
def _pg_schema_lock(spec: StorageSpec) -> Iterator[None]:
    """Hold a PostgreSQL advisory lock while the schema is created, so concurrent first writers do not race."""
    import sqlalchemy as sa

    engine = sa.create_engine(spec.url, poolclass=sa.pool.NullPool, **_pg_connect_args())
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(7260020)"))
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(7260020)"))
    finally:
        engine.dispose()


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
