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


def test_a_refused_url_never_shows_its_password(tmp_path: Path) -> None:
    for url in (
        f"postgresql://me:{SECRET}@127.0.0.1:1/d\x01b",  # a control character: refused before it is parsed
        f"postgresql://me:{SECRET}@127.0.0.1:1",  # no database
        f"mysql://me:{SECRET}@127.0.0.1/db",  # an unsupported scheme
        f"postgresql://me:{SECRET}@127.0.0.1:1/db",  # no server there
    ):
        ran = run_inprocess("nas", "search", "--space", "nasbench-graph:cora", "--budget", "2", "--storage", url,
                            "--out", "run", cwd=tmp_path)  # fmt: skip
        assert ran.returncode == 2 and "error:" in ran.stderr, ran.stderr
        assert SECRET not in ran.stdout + ran.stderr, ran.stderr
        assert not (tmp_path / "run").exists()


def test_a_run_on_postgresql_writes_no_password_anywhere(pg_url: str, tmp_path: Path) -> None:
    import optuna

    url = _with_password(pg_url)  # the local server trusts loopback, so any password gets in
    layered_dag(12, num_types=2, seed=0).save(tmp_path / "g.npz")
    commands = [
        ("nas", "search", "--space", "nasbench-graph:cora", "--budget", "3", "--out", "nas"),
        ("placement", "place", "g.npz", "--devices", "3", "--method", "heft", "--out", "place"),
        ("serving", "tune", "--engine", "sim", "--profile", "synthetic:8", "--rate", "500", "--budget", "3",
         "--out", "tune"),
    ]  # fmt: skip
    for argv in commands:
        ran = run_inprocess(*argv, "--storage", url, cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        assert SECRET not in ran.stdout + ran.stderr
    assert (tmp_path / "nas" / "log.txt").is_file()
    assert not _leaks(tmp_path), _leaks(tmp_path)
    storage = pg_url.replace("postgresql://", "postgresql+psycopg2://")
    summaries = optuna.get_all_study_summaries(storage=storage)
    assert len(summaries) == len(commands)
    for summary in summaries:
        attrs = optuna.load_study(study_name=summary.study_name, storage=storage).user_attrs
        assert SECRET not in repr(attrs), summary.study_name
    ran = run_inprocess("runs", "list", "--storage", url, cwd=tmp_path)
    assert ran.returncode == 0 and SECRET not in ran.stdout + ran.stderr, ran.stderr
