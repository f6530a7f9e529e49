"""The tables of a study store: Optuna's own (created by ``optuna.storages.RDBStorage``) and two of mlsysopt's.

* ``mlsysopt_meta``: ``schema_version`` (this module's :data:`SCHEMA_VERSION`) and the version of mlsysopt that
  last upgraded it. A store whose schema is newer than this mlsysopt's is refused with one error, never misread.
* ``mlsysopt_checkpoints``: the latest checkpoint of each run's study (bytes), so ``--resume`` works when the run
  folder lost its checkpoint.

Everything else is Optuna's schema, so Optuna's API and optuna-dashboard read a store as they read any Optuna RDB
storage. :data:`OPTUNA_SCHEMAS` are the Optuna schema revisions whose tables the batched trial writer
(:mod:`mlsysopt.store.trials`) writes directly; on any other the writer goes through Optuna's API, trial by trial.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlsysopt import __version__
from mlsysopt.errors import StoreError

if TYPE_CHECKING:
    import sqlalchemy as sa

#: The schema of mlsysopt's own tables (1: meta + checkpoints).
SCHEMA_VERSION = 1
#: Optuna schema revisions (alembic) of the tables the batched writer knows (Optuna 3.2 to 5.x).
OPTUNA_SCHEMAS = ("v3.2.0.a",)
META, CHECKPOINTS = "mlsysopt_meta", "mlsysopt_checkpoints"
OPTUNA_TABLES = ("studies", "study_directions", "study_user_attributes", "trials", "trial_params", "trial_values",
                 "trial_user_attributes", "trial_intermediate_values")  # fmt: skip


_OWN: list[Any] = []


def own_tables() -> tuple[sa.MetaData, sa.Table, sa.Table]:
    """mlsysopt's two tables, as SQLAlchemy Core tables (built once)."""
    if not _OWN:
        _OWN.extend(_build_own_tables())
    return _OWN[0], _OWN[1], _OWN[2]


def _build_own_tables() -> tuple[sa.MetaData, sa.Table, sa.Table]:
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    md = sa.MetaData()
    meta = sa.Table(META, md, sa.Column("key", sa.String(64), primary_key=True), sa.Column("value", sa.Text))
    ckpt = sa.Table(
        CHECKPOINTS,
        md,
        sa.Column("study_id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("saved_at", sa.Float, nullable=False),
    )
    return md, meta, ckpt


def read_schema_version(conn: sa.Connection) -> int | None:
    """The store's mlsysopt schema version (None: no mlsysopt table yet, e.g. a plain Optuna store or a new one)."""
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    if not sa.inspect(conn).has_table(META):
        return None
    _, meta, _ = own_tables()
    row = conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).first()
    if row is None:
        return None
    try:
        return int(row[0])
    except (TypeError, ValueError):
        raise StoreError(
            f"its {META} table holds schema_version {row[0]!r}, not a number: not a mlsysopt store"
        ) from None


def check_schema_version(version: int | None, written_by: str | None = None) -> None:
    """Refuse a store written by a newer mlsysopt (its schema is newer than :data:`SCHEMA_VERSION`)."""
    if version is not None and version > SCHEMA_VERSION:
        who = f" (mlsysopt {written_by})" if written_by else ""
        raise StoreError(
            f"the store was written by a newer mlsysopt{who}: its schema is version {version}, this mlsysopt "
            f"{__version__} reads version {SCHEMA_VERSION} and older; upgrade mlsysopt or choose another --storage"
        )


def ensure_own_tables(conn: sa.Connection) -> None:
    """Create mlsysopt's tables when missing and record the schema version (inside the caller's transaction)."""
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    md, meta, _ = own_tables()
    md.create_all(conn, checkfirst=True)
    have = {r[0]: r[1] for r in conn.execute(sa.select(meta.c.key, meta.c.value))}
    check_schema_version(int(have["schema_version"]) if "schema_version" in have else None, have.get("written_by"))
    if "schema_version" not in have:
        conn.execute(sa.insert(meta), [{"key": "schema_version", "value": str(SCHEMA_VERSION)},
                                       {"key": "written_by", "value": __version__}])  # fmt: skip


def written_by(conn: sa.Connection) -> str | None:
    """The mlsysopt version recorded in the store's meta table, if any."""
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    if not sa.inspect(conn).has_table(META):
        return None
    _, meta, _ = own_tables()
    row = conn.execute(sa.select(meta.c.value).where(meta.c.key == "written_by")).first()
    return None if row is None else str(row[0])


def reflect_optuna(engine: sa.Engine) -> dict[str, Any]:
    """Optuna's tables as reflected SQLAlchemy Core tables, by name (for the batched trial writer)."""
    import sqlalchemy as sa  # deferred: SQLAlchemy loads with the first query

    md = sa.MetaData()
    md.reflect(bind=engine, only=list(OPTUNA_TABLES))
    return dict(md.tables)
