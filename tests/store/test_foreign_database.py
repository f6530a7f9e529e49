"""A database that is not an mlsysopt/Optuna store is refused, and left as it was (issue #35)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mlsysopt.errors import StoreError
from mlsysopt.store.engine import probe
from mlsysopt.store.url import parse_storage


def _tables(path: Path) -> list[str]:
    con = sqlite3.connect(path)
    try:
        return sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'"))
    finally:
        con.close()


def _foreign(path: Path, table: str) -> Path:
    """An SQLite database of someone else's: one table ``table``."""
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE {table} (id INTEGER)")
    con.commit()
    con.close()
    return path


def test_a_foreign_sqlite_database_is_refused_and_untouched(tmp_path: Path) -> None:
    path = _foreign(tmp_path / "crm.db", "customers")
    spec = parse_storage(f"sqlite:///{path}")
    with pytest.raises(StoreError, match=r"holds other tables \(customers\) and no mlsysopt/Optuna store"):
        probe(spec)
    assert _tables(path) == ["customers"]


def test_an_empty_sqlite_database_is_accepted(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    con = sqlite3.connect(empty)
    con.execute("CREATE TABLE t (id INTEGER)")
    con.execute("DROP TABLE t")  # a real SQLite file with no table left
    con.commit()
    con.close()
    assert empty.stat().st_size > 0
    probe(parse_storage(f"sqlite:///{empty}"))  # no error: mlsysopt may create its store there


def test_the_cli_refuses_it_before_creating_the_run_folder(tmp_path: Path) -> None:
    from cli_helpers import assert_user_error, run_inprocess

    path = _foreign(tmp_path / "crm.db", "orders")
    out = tmp_path / "run"
    ran = run_inprocess("placement", "place", "montage", "--devices", "4", "--method", "heft", "--budget", "5",
                        "--storage", f"sqlite:///{path}", "--out", out)  # fmt: skip
    assert_user_error(ran, "holds other tables (orders)")
    assert not out.exists() and _tables(path) == ["orders"]


def test_a_foreign_postgresql_database_is_refused(pg_url: str) -> None:
    import psycopg2

    con = psycopg2.connect(pg_url.replace("postgresql+psycopg2://", "postgresql://"))
    con.autocommit = True
    con.cursor().execute("CREATE TABLE invoices (id INTEGER)")
    con.close()
    with pytest.raises(StoreError, match=r"holds other tables \(invoices\)"):
        probe(parse_storage(pg_url))
