"""Storage specs: every accepted form, and one clear error for each malformed or unsafe one."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlsysopt.errors import StoreError
from mlsysopt.store import Store, parse_storage, resolve_storage
from mlsysopt.store import url as url_mod


def test_none_and_sqlite_forms(tmp_path: Path) -> None:
    assert not parse_storage("none").enabled and not parse_storage(" OFF ").enabled
    a = parse_storage(f"sqlite:///{tmp_path}/s.db")
    assert a.kind == "sqlite" and a.path == tmp_path / "s.db" and a.timeout == 60.0
    rel = parse_storage("sqlite:///x/s.db?timeout=2.5", cwd=tmp_path)
    assert rel.path == tmp_path / "x" / "s.db" and rel.timeout == 2.5 and rel.url.endswith("?timeout=2.5")
    assert parse_storage(str(tmp_path)).path == tmp_path / "mlsysopt.db"  # a folder: mlsysopt.db inside
    assert parse_storage("my.db", cwd=tmp_path).path == tmp_path / "my.db"


def test_postgres_forms_mask_the_password() -> None:
    spec = parse_storage("postgres://bob:hunter2@db.example:5433/team")
    assert spec.kind == "postgresql" and spec.url.startswith("postgresql+psycopg2://bob:hunter2@")
    assert "hunter2" not in spec.display and "***" in spec.display
    sock = parse_storage("postgresql://bob@/team?host=/run/pg")
    assert sock.kind == "postgresql"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("mysql://u:secret@h/db", "unsupported storage scheme 'mysql'"),
        ("sqlite:///:memory:", "in-memory store is lost"),
        ("sqlite://relative.db", "sqlite:///RELATIVE/PATH.db"),
        ("sqlite:///x.db?journal=wal", "unknown SQLite URL option 'journal'"),
        ("sqlite:///x.db?timeout=-1", "timeout='-1'"),
        ("postgresql://u@h", "name the database"),
        ("postgresql:///db", "name the server"),
        ("", "empty storage URL"),
    ],
)
def test_malformed_specs_are_one_clear_error(text: str, needle: str) -> None:
    with pytest.raises(StoreError, match=None) as err:
        parse_storage(text)
    assert needle in str(err.value)
    assert "secret" not in str(err.value)


def test_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLSYSOPT_STORAGE", raising=False)
    default = resolve_storage(None, tmp_path / "runs" / "a")
    assert default.source == "default" and default.path == tmp_path / "runs" / "mlsysopt.db"
    monkeypatch.setenv("MLSYSOPT_STORAGE", "none")
    assert resolve_storage(None, tmp_path / "a").source == "MLSYSOPT_STORAGE"
    assert resolve_storage(f"{tmp_path}/x.db", tmp_path / "a").path == tmp_path / "x.db"  # --storage wins


def test_sqlite_paths_that_cannot_work_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        Store.probe(parse_storage(f"{tmp_path}/no/such/s.db"))
    (tmp_path / "junk.db").write_text("not a database")
    with pytest.raises(StoreError, match="not a SQLite database"):
        Store.probe(parse_storage(f"sqlite:///{tmp_path}/junk.db"))
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError, match="is a folder"):
        Store.probe(parse_storage(f"sqlite:///{tmp_path}/dir.db"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.db", "junk.db"]


def test_sqlite_on_a_network_file_system_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's locks are unreliable on NFS/SMB: the store refuses it up front rather than risk corruption."""
    monkeypatch.setattr(url_mod, "fs_type", lambda path: "nfs4")
    with pytest.raises(StoreError, match=r"network file system \(nfs4\).*PostgreSQL"):
        Store.probe(parse_storage(f"{tmp_path}/s.db"))


def test_fs_type_reads_the_mount_table() -> None:
    assert url_mod.fs_type(Path("/proc")) == "proc"
    assert url_mod.fs_type(Path("/")) not in ("", "proc")
