"""``mlsysopt runs list|show|compare|export|dashboard`` and ``--storage`` on the commands, as a user runs them."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from cli_helpers import PNG_MAGIC, assert_user_error, run_inprocess
from mlsysopt.io import RunDir
from mlsysopt.store import record_trial, storage
from mlsysopt.store.run import RunStore


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runs/mlsysopt.db with two NAS-like runs and a serving-like one (written through RunDir, as the systems do)."""
    root = tmp_path_factory.mktemp("runs")
    for name, offset, budget in (("nas1", 0.0, 6), ("nas2", 0.05, 8)):
        with RunDir(
            root / "runs" / name, {"command": "nas search", "budget": budget}, checkpoint=None, sink=RunStore
        ).check() as run:
            for i in range(budget):
                record_trial({"choice_0": i % 3, "blocks": 2}, 0.5 + offset + i / 100, record={"index": i}, key=i,
                             attrs={"test_perf": 0.4 + i / 100})  # fmt: skip
            run.write_json("result.json", {"command": "nas search", "best": {"perf": 0.5 + offset + budget / 100}})
    with RunDir(root / "runs" / "tune1", {"command": "serving tune"}, checkpoint=None, sink=RunStore).check():
        record_trial({"instances": 2, "max_batch": 8}, 12.5, record={"config": {"instances": 2}}, key=0)
    return root


def test_list_shows_every_run_with_its_headline(store: Path) -> None:
    ran = run_inprocess("runs", "list", cwd=store)  # finds ./runs/mlsysopt.db by itself
    assert ran.returncode == 0, ran.stderr
    for word in ("nas1", "nas2", "tune1", "nas", "serving", "done", "6/6", "best validation"):
        assert word in ran.stdout, word
    ran = run_inprocess("runs", "list", "--system", "serving", "--json", "--storage", store / "runs")
    rows = json.loads(ran.stdout)
    assert [r["name"] for r in rows] == ["tune1"] and rows[0]["command"] == "serving tune"


def test_show_names_the_run_its_settings_and_best_trials(store: Path) -> None:
    ran = run_inprocess("runs", "show", store / "runs" / "nas2", "--trials", "3", cwd=store)  # by its folder
    assert ran.returncode == 0, ran.stderr
    for word in ("nas2", "nas search", "maximize", "budget", "best 3 of 8", "choice_0", "0.62"):
        assert word in ran.stdout, word


def test_export_csv_and_json(store: Path, tmp_path: Path) -> None:
    ran = run_inprocess("runs", "export", "nas1", "--format", "csv", cwd=store)
    rows = list(csv.DictReader(io.StringIO(ran.stdout)))
    assert len(rows) == 6 and rows[0]["params.choice_0"] == "0" and float(rows[5]["value"]) == pytest.approx(0.55)
    assert "attrs.test_perf" in rows[0] and "record" not in rows[0]
    out = tmp_path / "nas1.json"
    assert run_inprocess("runs", "export", "nas1", "--format", "json", "--out", out, cwd=store).returncode == 0
    data = json.loads(out.read_text())
    assert data["settings"]["budget"] == 6 and [t["record"]["index"] for t in data["trials"]] == list(range(6))


def test_compare_prints_a_table_and_writes_one_figure(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp.png"
    ran = run_inprocess("runs", "compare", "nas1", "nas2", "--out", out, cwd=store)
    assert ran.returncode == 0, ran.stderr
    for word in ("nas1", "nas2", "best value", "0.55", "0.62", "budget"):  # budget: the setting that differs
        assert word in ran.stdout, word
    assert out.read_bytes()[:8] == PNG_MAGIC and "not comparable" not in ran.stderr
    ran = run_inprocess("runs", "compare", "nas1", "tune1", "--out", out, cwd=store)  # a NAS and a serving run
    assert ran.returncode == 0 and "optimize different objectives" in ran.stderr and "tune1: serving" in ran.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("runs", "show", "nas3"), "no run 'nas3'"),
        (("runs", "compare", "nas1"), "needs two or more runs"),
        (("runs", "export", "nas1", "--format", "xml"), "--format xml: choose csv or json"),
        (("runs", "list", "--storage", "sqlite:///nowhere/x.db"), "does not exist"),
        (("runs", "list", "--storage", "none"), "the study store is off"),
    ],
)
def test_runs_bad_inputs_are_one_error(store: Path, args: tuple[str, ...], needle: str) -> None:
    assert_user_error(run_inprocess(*args, cwd=store), needle)


def test_runs_list_without_a_store_says_where_it_looked(tmp_path: Path) -> None:
    assert_user_error(run_inprocess("runs", "list", cwd=tmp_path), "no study store here")
    assert not any(tmp_path.iterdir())


def test_every_command_with_a_run_folder_takes_storage(tmp_path: Path) -> None:
    ran = run_inprocess("graph", "simulate", "--help")
    assert "--storage" in ran.stdout
    bad = ("graph", "simulate", "montage", "--devices", "2", "--num-tasks", "60", "--out", tmp_path / "r")
    assert_user_error(run_inprocess(*bad, "--storage", "mysql://u:pw@h/db"), "unsupported storage scheme 'mysql'")
    assert_user_error(run_inprocess(*bad, "--storage", "postgresql://u@127.0.0.1:1/db"), "cannot reach")
    assert not any(tmp_path.iterdir())
    with storage(None):
        ran = run_inprocess(*bad, "--storage", tmp_path / "team.db")
    assert ran.returncode == 0, ran.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r", "team.db", "team.db-shm", "team.db-wal"] or (
        sorted(p.name for p in tmp_path.iterdir())[:2] == ["r", "team.db"]
    )
    log = (tmp_path / "r" / "log.txt").read_text()
    assert "mlsysopt graph simulate montage" in log and "makespan" in log and "=== done" in log


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (make test installs it)")
def test_dashboard_shows_a_study_and_its_trials_in_chromium(store: Path, tmp_path: Path) -> None:
    """``mlsysopt runs dashboard`` starts optuna-dashboard on 127.0.0.1; a study's trial table lists its trials."""
    import socket

    from chromium_helpers import Chromium

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "mlsysopt.cli", "runs", "dashboard", "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=store, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    browser = None
    try:
        api = f"http://127.0.0.1:{port}/api/studies"
        deadline = time.monotonic() + 90
        studies = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(api, timeout=5) as r:
                    studies = json.loads(r.read())["study_summaries"]
                break
            except OSError:
                time.sleep(0.3)
        assert studies is not None, proc.stdout.read() if proc.poll() is not None else "dashboard did not start"
        sid = next(s["study_id"] for s in studies if s["study_name"] == "nas2")
        browser = Chromium(tmp_path)
        text = browser.open_url(
            f"http://127.0.0.1:{port}/dashboard/studies/{sid}/trials",
            "document.body.innerText.includes('8 Trials') ? document.body.innerText : ''",
        )
        assert text, "the trial list did not show nas2's trials"
        for word in ("nas2", "Trial 0", "Trial 7", "Complete", "choice_0", "test_perf"):
            assert word in text, word
    finally:
        if browser is not None:
            browser.close()
        proc.terminate()
        proc.wait(timeout=30)
