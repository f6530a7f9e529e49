"""The NAS experiment layer: options checked cheaply, every input validated before the run folder exists, the run
folder (settings, checkpoint, result.json, plots), crashes before and after the first checkpoint, resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlsysopt.errors import InvalidConstraint, InvalidDataset, InvalidRunDir, InvalidSpace, MlsysoptError
from mlsysopt.nas import Evaluation, SearchOptions, prepare_search
from mlsysopt.nas.defaults import default_method

MEDIANS = {"max_latency_ms": 3.7309, "max_params": 1197575.0}  # cora's median latency and params


def _options(**kw: object) -> SearchOptions:
    return SearchOptions(**{"budget": 8, "workers": 2, "limits": dict(MEDIANS), **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"budget": 0}, "--budget must be >= 1"),
        ({"workers": 0}, "--workers must be >= 1"),
        ({"limits": {"max_params": -1.0}}, "--max-params must be a number > 0"),
        ({"limits": {"max_params": float("nan")}}, "--max-params must be a number > 0"),
        ({"limits": {"watts": 3.0}}, "unknown constraint 'watts'"),
        ({"mode": "medium"}, "unknown --constraint-mode 'medium'"),
        ({"method": "darts"}, "unknown NAS method 'darts'"),
        ({"space_options": {"width": 3}}, r"unknown space option\(s\) \['width'\]"),
    ],
)
def test_options_are_checked_on_creation(kw: dict, match: str) -> None:
    with pytest.raises(MlsysoptError, match=match):
        _options(**kw)


def test_options_and_their_checks_import_no_torch_nor_the_method() -> None:
    code = (
        "import sys\nfrom mlsysopt.nas import SearchOptions\n"
        "SearchOptions(method='tpe', budget=3, limits={'max_params': 10.0}).settings()\n"
        "print(','.join(m for m in ('torch', 'optuna', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"space": "nasbench-graph:nope"}, InvalidDataset, "unknown NAS-Bench-Graph dataset 'nope'"),
        ({"limits": {"max_flops": 1e6}}, InvalidConstraint, "needs resource 'flops'"),
        ({"space_options": {"epochs": 2}}, MlsysoptError, "--epochs applies only to the CNN spaces"),
        ({"space": "digits", "space_options": {"ops": ["conv9x9"]}}, InvalidSpace, "unknown op"),
    ],
)
def test_a_refused_input_creates_nothing(tmp_path: Path, kw: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        prepare_search(tmp_path / "r", _options(**kw))
    assert not (tmp_path / "r").exists()


def test_run_folder_checks_come_first_and_write_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidRunDir, match="exists and is not a folder"):
        prepare_search(tmp_path / "file", _options())
    with pytest.raises(InvalidRunDir, match="--resume: no checkpoint at"):
        prepare_search(tmp_path / "r", _options(), resume=True)
    assert not (tmp_path / "r").exists()


def test_prepare_writes_nothing_and_run_writes_the_run_folder(tmp_path: Path) -> None:
    out = tmp_path / "r"
    job = prepare_search(out, _options(seed=3))
    assert not out.exists() and job.resumed_from == 0
    done = job.run()
    assert sorted(p.name for p in out.iterdir()) == sorted([*done.files, "log.txt"])
    record = json.loads((out / "result.json").read_text())
    assert record == json.loads(json.dumps(done.record))
    assert json.loads((out / "settings.json").read_text()) == job.options.settings() == record["settings"]
    assert record["evaluated"] == 8 and all(ev["feasible"] for ev in record["evaluations"])
    assert record["regret"] == done.regret == record["best_feasible_test_in_table"] - record["best"]["test_perf"]
    with pytest.raises(InvalidRunDir, match="checkpoint.pt exists: pass --resume"):
        prepare_search(out, _options(seed=3))


def test_crash_before_the_first_checkpoint_leaves_nothing_after_it_resumes_exactly(tmp_path: Path) -> None:
    class Crash(Exception):
        pass

    def crash_at(k: int):
        def on_eval(ev: object, n: int) -> None:
            if n == k:
                raise Crash

        return on_eval

    whole = prepare_search(tmp_path / "whole", _options(budget=10)).run()
    out = tmp_path / "cut"
    with pytest.raises(Crash):
        prepare_search(out, _options(budget=10)).run(on_eval=crash_at(1))  # inside the first batch
    assert not out.exists()
    with pytest.raises(Crash):
        prepare_search(out, _options(budget=10)).run(on_eval=crash_at(5))  # after two batches were checkpointed
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "log.txt", "settings.json"]
    started = default_method(10)  # --method auto: the default of the budget's class (#34)
    with pytest.raises(InvalidRunDir, match=rf"other settings: method '{started}' \(now 'random'\)"):
        prepare_search(out, _options(budget=10, method="random"), resume=True)
    job = prepare_search(out, _options(budget=10, workers=3), resume=True)  # workers may change on resume
    assert job.resumed_from == 4
    done = job.run()
    assert done.record["resumed_from"] == 4
    assert [ev.arch for ev in done.result.history[:4]] == [ev.arch for ev in whole.result.history[:4]]
    assert len(done.result.history) == 10


def test_resume_with_the_same_workers_is_bit_identical(tmp_path: Path) -> None:
    whole = prepare_search(tmp_path / "whole", _options(budget=10, method="reinforce")).run()

    def crash(ev: object, n: int) -> None:
        if n == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare_search(tmp_path / "cut", _options(budget=10, method="reinforce")).run(on_eval=crash)
    done = prepare_search(tmp_path / "cut", _options(budget=10, method="reinforce"), resume=True).run()

    def key(ev: Evaluation) -> tuple:
        return ev.arch, ev.perf, ev.test_perf, ev.resources, ev.ok  # all but the timing

    assert [key(e) for e in done.result.history] == [key(e) for e in whole.result.history]
    assert done.record["best"]["index"] == whole.record["best"]["index"]
