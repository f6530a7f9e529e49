"""No secret is ever written: a password in a storage URL never reaches a stream, a file of the run folder, the log,
the lock or the store's attributes, whether the command succeeds or refuses the URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import run_inprocess
from mlsysopt.graph.generate import layered_dag
from mlsysopt.text import mask_secrets

pytestmark = [pytest.mark.xdist_group("postgres"), pytest.mark.usefixtures("one_torch_thread")]
SECRET = "S3cretPW0rd"


def _with_password(url: str) -> str:
    return url.replace("postgresql://mlsysopt@", f"postgresql://mlsysopt:{SECRET}@")


def _leaks(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://me:pw@h:5432/db", "postgresql://me:***@h:5432/db"),
        ("--storage postgresql://me:p@ss@h/db --out x", "--storage postgresql://me:***@h/db --out x"),
        ("postgresql://me@h/db?password=pw&sslmode=require", "postgresql://me@h/db?password=***&sslmode=require"),
        ("sqlite:///runs/mlsysopt.db at 12:30@noon", "sqlite:///runs/mlsysopt.db at 12:30@noon"),
    ],
)
def test_one_function_masks_every_url_password(text: str, shown: str) -> None:
    assert mask_secrets(text) == shown


#: One command of each family (placeholders: the inputs of :func:`_inputs`), every one taking ``--storage``.
FAMILIES = {
    # random search: the URL takes the same path with any method, and EPNAS would first fit (or read) its transfer prior
    "nas search": ("nas", "search", "--space", "nasbench-graph:cora", "--method", "random", "--budget", "3", "--out",
                   "nas"),
    "placement place": ("placement", "place", "g.npz", "--devices", "3", "--method", "heft", "--out", "place"),
    "placement compare": ("placement", "compare", "g.npz", "--devices", "3", "--methods", "heft,random", "--seeds",
                          "2", "--budget", "20", "--out", "compare"),
    "serving tune": ("serving", "tune", "--engine", "sim", "--profile", "synthetic:8", "--rate", "500", "--budget",
                     "3", "--out", "tune"),
    "costmodel train": ("costmodel", "train", "--data", "data", "--epochs", "1", "--out", "cm"),
}  # fmt: skip
#: The commands that read a store, after the runs above (the study names are the run folders).
READERS = [
    ("runs", "list"),
    ("runs", "show", "compare"),
    ("runs", "export", "nas", "--format", "json", "--out", "nas.json"),
    ("runs", "export", "compare", "--out", "compare.csv"),
    ("runs", "export", "tune", "--format", "json"),
]


def _inputs(d: Path) -> None:
    layered_dag(12, num_types=2, seed=0).save(d / "g.npz")
    ran = run_inprocess("costmodel", "synth", "layout", "--out", "data", "--graphs", "2", "--nodes", "50-60",
                        "--configs", "4", cwd=d)  # fmt: skip
    assert ran.returncode == 0, ran.stderr


def test_a_refused_url_never_shows_its_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _inputs(tmp_path)
    before = {p for p in tmp_path.rglob("*")}
    for url in (
        f"postgresql://me:{SECRET}@127.0.0.1:1/d\x01b",  # a control character: refused before it is parsed
        f"postgresql://me:{SECRET}@127.0.0.1:1",  # no database
        f"mysql://me:{SECRET}@127.0.0.1/db",  # an unsupported scheme
        f"postgresql://me:{SECRET}@127.0.0.1:1/db",  # no server there
    ):
        for argv in [*FAMILIES.values(), *READERS]:
            ran = run_inprocess(*argv, "--storage", url, cwd=tmp_path)
            what = f"{argv[:2]} {url!r}: {ran.stderr[-300:]}"
            assert ran.returncode == 2 and "error:" in ran.stderr, what
            assert SECRET not in ran.stdout + ran.stderr, what
    monkeypatch.setenv("MLSYSOPT_STORAGE", f"postgresql://me:{SECRET}@127.0.0.1:1/d\x01b")  # from the environment
    for argv in (FAMILIES["placement compare"], READERS[1]):
        ran = run_inprocess(*argv, cwd=tmp_path)
        assert ran.returncode == 2 and "error:" in ran.stderr and SECRET not in ran.stdout + ran.stderr, ran.stderr
    assert {p for p in tmp_path.rglob("*")} == before  # no run folder, no export
    assert not _leaks(tmp_path), _leaks(tmp_path)


def test_a_run_on_postgresql_writes_no_password_anywhere(pg_url: str, tmp_path: Path) -> None:
    """Every command family against PostgreSQL with a password, then every reader: no stream, no file of the run
    folders, logs, settings, results or exports, no study/trial attribute holds the password."""
    url = _with_password(pg_url)  # the local server trusts loopback, so any password gets in
    _inputs(tmp_path)
    for argv in FAMILIES.values():
        ran = run_inprocess(*argv, "--storage", url, cwd=tmp_path)
        assert ran.returncode == 0, (argv[:2], ran.stderr)
        assert SECRET not in ran.stdout + ran.stderr, argv[:2]
    for folder in ("nas", "place", "compare", "tune", "cm"):
        assert (tmp_path / folder / "log.txt").is_file(), folder
    for argv in READERS:
        ran = run_inprocess(*argv, "--storage", url, cwd=tmp_path)
        assert ran.returncode == 0, (argv, ran.stderr)
        assert SECRET not in ran.stdout + ran.stderr, argv
    assert (tmp_path / "nas.json").is_file() and (tmp_path / "compare.csv").is_file()
    assert not _leaks(tmp_path), _leaks(tmp_path)
    import sqlalchemy

    engine = sqlalchemy.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        meta = sqlalchemy.MetaData()
        meta.reflect(engine)
        with engine.connect() as db:  # every row of every table: the studies, their trials and all attributes
            rows = {name: db.execute(table.select()).fetchall() for name, table in meta.tables.items()}
    finally:
        engine.dispose()
    assert len(rows["studies"]) >= len(FAMILIES) and rows["study_user_attributes"], sorted(rows)
    assert rows["trial_user_attributes"]
    leaking = [name for name, table in rows.items() if SECRET in repr(table)]
    assert not leaking, leaking
