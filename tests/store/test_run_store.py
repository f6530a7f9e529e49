"""A run folder and its study: created with the run's settings, trials recorded in one call, status and headline at
the end, nothing left behind by a run that failed early, --resume from the store, log.txt."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import optuna
import pytest

from cli_helpers import run_inprocess
from mlsysopt.errors import InvalidRunDir, StoreError
from mlsysopt.io import RunDir
from mlsysopt.store import record_trial, storage
from mlsysopt.store.run import RunStore

SETTINGS = {"command": "nas search", "budget": 5, "space": "nasbench-graph:cora"}


def _study(db: Path, name: str = "run") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")


def test_a_run_writes_its_study_beside_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = RunDir(tmp_path / "run", SETTINGS, checkpoint="checkpoint.json", sink=RunStore).check()
    assert not any(tmp_path.iterdir())  # checking creates nothing, the store included
    with run:
        print("evaluating 5 architectures")
        for i in range(5):
            assert record_trial({"choice_0": i}, 0.5 + i / 10, record={"index": i, "perf": 0.5 + i / 10}, key=i)
        run.save_checkpoint({"history": list(range(5))})
        run.write_json("result.json", {"command": "nas search", "best": {"perf": 0.9, "test_perf": 0.88}})
    study = _study(tmp_path / "mlsysopt.db")
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE and study.best_value == pytest.approx(0.9)
    attrs = study.user_attrs
    assert attrs["settings.budget"] == 5 and attrs["settings.space"] == "nasbench-graph:cora"
    assert attrs["mlsysopt.run_dir"] == str(tmp_path / "run") and attrs["mlsysopt.system"] == "nas"
    assert attrs["mlsysopt.status"] == "done" and attrs["mlsysopt.headline"]["value"] == 0.9
    assert [t.user_attrs["record"]["index"] for t in study.trials] == [0, 1, 2, 3, 4]
    log = (tmp_path / "run" / "log.txt").read_text()
    assert "evaluating 5 architectures" in log and "study 'run' in sqlite:///" in log
    assert log.rstrip().endswith("s") and "=== done" in log
    assert "evaluating 5 architectures" in capsys.readouterr().out  # the terminal still got it


def test_a_run_that_fails_before_its_checkpoint_leaves_no_study_and_no_store(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), RunDir(tmp_path / "run", SETTINGS, checkpoint="c.json", sink=RunStore).check():
        record_trial({"x": 1}, 1.0)
        raise RuntimeError("crash in the first step")
    assert not any(tmp_path.iterdir())


def test_a_failed_run_with_a_checkpoint_keeps_its_study_as_failed(tmp_path: Path) -> None:
    with (
        pytest.raises(KeyboardInterrupt),
        RunDir(tmp_path / "run", SETTINGS, checkpoint="c.json", sink=RunStore).check() as run,
    ):
        record_trial({"x": 1}, 1.0, key=0)
        run.save_checkpoint({"n": 1})
        raise KeyboardInterrupt
    study = _study(tmp_path / "mlsysopt.db")
    assert study.user_attrs["mlsysopt.status"] == "interrupted" and len(study.trials) == 1


def test_resume_continues_the_same_study_and_the_store_can_stand_in_for_a_lost_checkpoint(tmp_path: Path) -> None:
    with RunDir(tmp_path / "run", SETTINGS, checkpoint="checkpoint.json", sink=RunStore).check() as run:
        for i in range(3):
            record_trial({"x": i}, float(i), key=i)
        run.save_checkpoint({"done": 3})
    (tmp_path / "run" / "checkpoint.json").unlink()  # the folder lost its checkpoint (a node's disk went away)
    again = RunDir(tmp_path / "run", SETTINGS, resume=True, checkpoint="checkpoint.json", sink=RunStore).check()
    assert again.load_checkpoint() == {"done": 3}  # from the store, before the folder is touched
    with again:
        assert (tmp_path / "run" / "checkpoint.json").is_file()  # the folder is the source of truth again
        for i in range(2, 6):  # the resumed search redoes step 2: its key makes the rewrite exact
            record_trial({"x": i}, float(i), key=i)
    study = _study(tmp_path / "mlsysopt.db")
    assert [t.params["x"] for t in study.trials] == [0, 1, 2, 3, 4, 5]
    assert study.user_attrs["mlsysopt.resumed"] == 1 and study.user_attrs["mlsysopt.status"] == "done"
    assert (tmp_path / "run" / "log.txt").read_text().count("=== ") == 4  # started, done, resumed, done


def test_resume_without_a_checkpoint_anywhere_says_so(tmp_path: Path) -> None:
    with pytest.raises(InvalidRunDir, match=r"no checkpoint at .* nor a copy in the study store"):
        RunDir(tmp_path / "run", SETTINGS, resume=True, checkpoint="checkpoint.json", sink=RunStore).check()
    assert not any(tmp_path.iterdir())


def test_storage_none_and_an_explicit_store(tmp_path: Path) -> None:
    with storage("none"), RunDir(tmp_path / "a", SETTINGS, checkpoint=None, sink=RunStore).check():
        assert not record_trial({"x": 1}, 1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
    with storage(str(tmp_path / "team.db")), RunDir(tmp_path / "b", SETTINGS, checkpoint=None, sink=RunStore).check():
        record_trial({"x": 1}, 1.0)
    assert len(_study(tmp_path / "team.db", "b").trials) == 1


def test_a_bad_store_is_refused_before_the_folder_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLSYSOPT_STORAGE", "postgresql://nobody@127.0.0.1:1/db")
    with pytest.raises(
        StoreError, match=r"MLSYSOPT_STORAGE=postgresql\+psycopg2://nobody@127.0.0.1:1/db: cannot reach"
    ):
        RunDir(tmp_path / "run", SETTINGS, checkpoint=None, sink=RunStore).check()
    assert not any(tmp_path.iterdir())


def test_a_store_failing_mid_run_stops_the_run_with_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MLSYSOPT_STORE_ERRORS", raising=False)
    with (
        pytest.raises(StoreError) as err,
        RunDir(tmp_path / "run", SETTINGS, checkpoint=None, sink=RunStore).check() as run,
    ):
        record_trial({"x": 1}, 1.0)
        run.store.flush()
        record_trial({"x": 1.5}, 2.0)  # another kind of parameter: the store refuses it
        run.store.flush()
    text = str(err.value)
    assert "\n" not in text and "so the run stopped" in text and "MLSYSOPT_STORE_ERRORS=continue" in text
    assert not (tmp_path / "run").exists()  # failed before a checkpoint: the folder and the study are removed
    assert _study_names(tmp_path / "mlsysopt.db") == []


def test_a_store_failing_mid_run_under_continue_stops_the_store_not_the_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLSYSOPT_STORE_ERRORS", "continue")
    warned = pytest.warns(UserWarning, match="stopped taking this run's trials")
    with warned, RunDir(tmp_path / "run", SETTINGS, checkpoint=None, sink=RunStore).check() as run:
        record_trial({"x": 1}, 1.0)
        run.store.flush()
        record_trial({"x": 1.5}, 2.0)  # another kind of parameter: the store refuses it
        run.store.flush()
        assert not record_trial({"x": 3}, 3.0)
        run.write_json("result.json", {"ok": True})
    assert (tmp_path / "run" / "result.json").is_file()
    attrs = optuna.load_study(study_name="run", storage=f"sqlite:///{tmp_path / 'mlsysopt.db'}").user_attrs
    assert attrs["mlsysopt.status"] == "done" and "Cannot set different distribution" in attrs["mlsysopt.incomplete"]


def _study_names(db: Path) -> list[str]:
    return [s.study_name for s in optuna.get_all_study_summaries(f"sqlite:///{db}")]


def test_a_run_records_from_a_forked_worker_directly(tmp_path: Path) -> None:
    with RunDir(tmp_path / "run", SETTINGS, checkpoint=None, sink=RunStore).check() as run:
        record_trial({"x": 0}, 0.0, key="parent")
        run.store.flush()
        pid = os.fork()
        if pid == 0:  # the child writes through its own connection, synchronously
            code = 0 if record_trial({"x": 1}, 1.0, key="child") else 1
            os._exit(code)
        assert os.waitpid(pid, 0)[1] == 0
    assert sorted(t.user_attrs["key"] for t in _study(tmp_path / "mlsysopt.db").trials) == ["child", "parent"]


_KILLED_RUN = """
import sys, time
from mlsysopt.io import RunDir
from mlsysopt.store import record_trial
from mlsysopt.store.run import RunStore
with RunDir(sys.argv[1], {"command": "nas search"}, checkpoint="checkpoint.json", sink=RunStore).check() as run:
    for i in range(1000):
        record_trial({"x": i}, float(i), key=i)
        if i % 10 == 9:
            run.save_checkpoint({"done": i + 1})
            print(i + 1, flush=True)
        time.sleep(0.01)
"""


def test_a_killed_run_is_listed_as_killed_and_keeps_what_its_checkpoint_has(tmp_path: Path) -> None:
    import signal
    import sys

    from mlsysopt.store import Store, parse_storage
    from mlsysopt.store.query import list_runs

    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_RUN, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True
    )
    try:
        for _ in range(3):
            assert proc.stdout is not None and proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    store = Store.open(parse_storage(str(tmp_path / "mlsysopt.db")))
    (summary,) = list_runs(store)
    assert summary.status == "killed" and summary.name == "run"
    assert (tmp_path / "run" / ".lock").is_file()  # kill -9 leaves the file; the kernel released its lock
    sid = summary.study_id
    store.set_study_attrs(sid, {"mlsysopt.pid": os.getppid()})  # its pid reused by a live process: still killed
    assert list_runs(store)[0].status == "killed"
    ran = run_inprocess("runs", "show", "run", "--storage", str(tmp_path / "mlsysopt.db"))
    assert ran.returncode == 0 and "killed" in ran.stdout, ran.stderr
    done = json.loads((tmp_path / "run" / "checkpoint.json").read_text())["done"]
    numbers = sorted(t.number for t in _study(tmp_path / "mlsysopt.db").trials)
    assert numbers == list(range(len(numbers)))  # whole trials, no gap: what was written before the kill
    with RunDir(
        tmp_path / "run", {"command": "nas search"}, resume=True, checkpoint="checkpoint.json", sink=RunStore
    ).check():
        for i in range(done + 5):  # as a resumed search does: its checkpoint's history again, then new steps
            record_trial({"x": i}, float(i), key=i)
    study = _study(tmp_path / "mlsysopt.db")
    assert sorted(t.params["x"] for t in study.trials)[: done + 5] == list(range(done + 5))
    assert len({t.params["x"] for t in study.trials}) == len(study.trials)  # one copy of each
    assert study.user_attrs["mlsysopt.status"] == "done" and list_runs(store)[0].status == "done"
    assert not (tmp_path / "run" / ".lock").exists()  # the resume took the stale lock over and removed it
    assert all(t.state.name != "RUNNING" for t in study.trials)


def test_a_finished_run_whose_status_the_store_missed_is_never_listed_killed(tmp_path: Path, monkeypatch) -> None:
    """The store refuses the final status writes (another writer holding its lock): the run finishes (policy
    continue), its process is gone as far as the folder can tell, yet it is listed by what its folder says, not as
    ``killed``; while a run holds its folder it is ``running``."""
    from mlsysopt.store import Store, parse_storage
    from mlsysopt.store.query import list_runs

    monkeypatch.setenv("MLSYSOPT_STORE_ERRORS", "continue")
    store = Store.open(parse_storage(str(tmp_path / "mlsysopt.db")))
    with pytest.warns(UserWarning), RunDir(tmp_path / "run", SETTINGS, checkpoint=None, sink=RunStore).check() as run:
        record_trial({"x": 1}, 1.0)
        run.store.flush()
        assert [r.status for r in list_runs(store)] == ["running"]  # its process holds the folder
        monkeypatch.setattr(Store, "set_study_attrs", _locked)
        run.write_json("result.json", {"ok": True})
    monkeypatch.undo()
    (summary,) = list_runs(store)
    assert store.study_attrs(summary.study_id)["mlsysopt.status"] == "running"  # what the store was left with
    gone = subprocess.Popen(["true"])
    gone.wait()
    store.set_study_attrs(summary.study_id, {"mlsysopt.pid": gone.pid})  # as if a process of its own had run it
    (summary,) = list_runs(store)
    assert summary.status == "incomplete" and (tmp_path / "run" / "result.json").is_file()
    log = (tmp_path / "run" / "log.txt").read_text()
    (tmp_path / "run" / "log.txt").write_text(
        log.replace("closed: done", "closed: failed").replace("=== done", "=== failed")
    )
    assert list_runs(store)[0].status == "failed"  # a failed run is listed as failed, whatever the store missed


def _locked(*args: object, **kwargs: object) -> None:
    raise StoreError("database is locked")
