"""How a study store is reached and created: engine options, one error per database failure, the empty-store
template, Optuna's schema revision and check, PostgreSQL's schema lock.

A new SQLite store is a copy of an empty one (Optuna's tables and mlsysopt's, WAL mode) built once and kept in the
user's cache folder: Optuna's schema takes ~1 s to create with its migration tools, a copy ~1 ms. SQLite
connections wait for each other up to the spec's timeout (``sqlite:///F.db?timeout=S``, 60 s by default) and commit
with ``synchronous=NORMAL`` (durable at WAL checkpoints, never corrupt); a file still locked past the timeout is one
error pointing to PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import MlsysoptError, StoreBusy, StoreError
from mlsysopt.io import write_atomic
from mlsysopt.store.schema import (
    SCHEMA_VERSION,
    check_schema_version,
    ensure_own_tables,
    read_schema_version,
    written_by,
)
from mlsysopt.store.url import StorageSpec, check_sqlite_path

if TYPE_CHECKING:
    import sqlalchemy as sa
    from optuna.storages import RDBStorage

CONNECT_TIMEOUT = 10  # seconds to reach a PostgreSQL server
_TEMPLATE: bytes | None = None
_HEAD: list[str] = []  # Optuna's newest schema revision (its alembic scripts take ~0.1 s to read: once)


def quiet_optuna() -> None:
    import optuna  # deferred: Optuna loads only when a study storage is opened

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def sqlite_connect(path: Path, timeout: float) -> sqlite3.Connection:
    con = sqlite3.connect(str(path), timeout=timeout, check_same_thread=False)
    con.execute("PRAGMA synchronous=NORMAL")  # with WAL: durable at checkpoints, never corrupt
    return con


def engine_kwargs(spec: StorageSpec) -> dict[str, Any]:
    """``create_engine`` options of a store: a busy timeout for SQLite, a connect timeout and pings for PostgreSQL."""
    if spec.kind == "sqlite":
        path, timeout = spec.path, spec.timeout
        return {"creator": lambda: sqlite_connect(path, timeout)}  # type: ignore[arg-type]
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
    if spec.kind == "sqlite" and ("locked" in text or "busy" in text):
        return StoreBusy(
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


def template_cache() -> Path:
    """Where the empty store of this Optuna version is kept between processes (the user's cache folder)."""

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlsysopt"
    return base / f"store-template-optuna{version('optuna')}-schema{SCHEMA_VERSION}.db"


def template() -> bytes:
    """An empty store (Optuna's tables + mlsysopt's, WAL mode) as bytes: built once (Optuna's schema takes ~1 s
    with its migration tools), then copied from the user's cache folder."""
    global _TEMPLATE
    if _TEMPLATE is None:
        cached = template_cache()
        with contextlib.suppress(OSError):
            data = cached.read_bytes()
            if data.startswith(b"SQLite format 3\x00"):
                _TEMPLATE = data
                return data
        from optuna.storages import RDBStorage  # deferred: Optuna loads only when a study storage is opened

        quiet_optuna()
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
        with contextlib.suppress(OSError, MlsysoptError):
            write_atomic(cached, _TEMPLATE)
    return _TEMPLATE


def create_sqlite(path: Path) -> None:
    """Put an empty store at ``path`` unless another process just did (never clobbers an existing store)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(template())
        if path.exists() and path.stat().st_size == 0:
            os.replace(tmp, path)  # an empty file (touched by hand): take its place
        else:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def revision(engine: sa.Engine) -> str | None:
    """The Optuna schema revision of the store (alembic's ``version_num``), None when it has none."""
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    except sa.exc.SQLAlchemyError:
        return None


def check_optuna_schema(storage: RDBStorage) -> None:
    """Optuna's own check (its tables are of this Optuna's schema), with the newest revision read once."""
    from optuna import version  # deferred: Optuna loads only when a study storage is opened

    if not _HEAD:
        _HEAD.append(storage.get_head_version())
    current = storage.get_current_version()
    if current != _HEAD[0]:
        known = current in storage.get_all_versions()
        what = "run 'optuna storage upgrade --storage URL'" if known else "upgrade optuna (pip install -U optuna)"
        raise RuntimeError(
            f"its Optuna tables are of schema {current}, this optuna {version.__version__} uses {_HEAD[0]}: {what}"
        )


def check_meta(spec: StorageSpec, meta: dict[str, Any]) -> None:
    try:
        version = int(meta["schema_version"]) if "schema_version" in meta else None
    except ValueError:
        raise StoreError(f"{spec.where()}: not a mlsysopt store (schema_version {meta['schema_version']!r})") from None
    try:
        check_schema_version(version, meta.get("written_by"))
    except StoreError as exc:
        raise StoreError(f"{spec.where()}: {exc}") from None


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
        check_foreign(spec, names)
        check_meta(spec, meta)
        return True
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    engine = sa.create_engine(spec.url, poolclass=sa.pool.NullPool, **pg_connect_args())
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
            version = read_schema_version(conn)
            by = written_by(conn)
            tables = set(sa.inspect(conn).get_table_names())
            exists = "studies" in tables
    except MlsysoptError as exc:
        raise StoreError(f"{spec.where()}: {exc}") from None
    except sa.exc.SQLAlchemyError as exc:
        raise db_error(spec, exc) from None
    finally:
        engine.dispose()
    check_foreign(spec, tables)
    try:
        check_schema_version(version, by)
    except StoreError as exc:
        raise StoreError(f"{spec.where()}: {exc}") from None
    return exists


#: Tables whose presence says a database is an Optuna (and so possibly an mlsysopt) store.
STORE_TABLES = frozenset({"studies", "version_info", "alembic_version", "mlsysopt_meta"})


def check_foreign(spec: StorageSpec, tables: set[str]) -> None:
    """Refuse a database that holds tables but none of an Optuna/mlsysopt store's: adding Optuna's tables to
    someone else's database would change it behind their back.

    Args:
        spec: The store's URL, parsed.
        tables: The names of the tables the database holds.

    Raises:
        StoreError: If ``tables`` is not empty and holds none of :data:`STORE_TABLES`.
    """
    if tables and not (tables & STORE_TABLES):
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(
            f"{spec.where()}: this database holds other tables ({shown}) and no mlsysopt/Optuna store: mlsysopt "
            "will not add its tables to it; give a new file, an empty database or an existing store"
        )


def pg_connect_args() -> dict[str, Any]:
    return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT, "application_name": "mlsysopt"}}


@contextlib.contextmanager
def pg_schema_lock(spec: StorageSpec) -> Iterator[None]:
    """Hold a PostgreSQL advisory lock while the schema is created, so concurrent first writers do not race."""
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    engine = sa.create_engine(spec.url, poolclass=sa.pool.NullPool, **pg_connect_args())
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(7260020)"))
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(7260020)"))
    finally:
        engine.dispose()
