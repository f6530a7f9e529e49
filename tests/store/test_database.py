"""The store on SQLite: trials read back through Optuna's API exactly, keys make writes exact, schemas are checked."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from mlsysopt.errors import StoreError
from mlsysopt.store import SCHEMA_VERSION, Store, TrialRecord, parse_storage


def _trials() -> list[TrialRecord]:
    return [
        TrialRecord(
            {"layers": 3, "lr": 0.01, "wide": True, "op": "gin"},
            [0.75],
            record={"i": 0, "nan": math.nan},
            attrs={"test_acc": 0.7},
            key="0",
        ),
        TrialRecord(
            {"layers": 5, "lr": 0.1, "wide": False, "op": "sage"},
            [math.inf],
            key="1",
            intermediate={0: 1.5, 1: math.nan, 2: -math.inf},
        ),
        TrialRecord({"layers": 2}, [math.nan], key="2"),  # a NaN value: failed, as Optuna's tell makes it
        TrialRecord(
            {"op": "gcn"}, None, state="running", key="3", distributions={"op": CategoricalDistribution(("gcn", "gin"))}
        ),
    ]


def _study(tmp_path: Path) -> tuple[Store, int]:
    store = Store.open(parse_storage(f"{tmp_path}/s.db"))
    sid, name = store.create_study("run", "maximize", {"mlsysopt.command": "nas search", "settings.budget": 4})
    assert name == "run"
    return store, sid


def test_a_new_store_is_in_wal_mode_with_both_schemas(tmp_path: Path) -> None:
    _study(tmp_path)
    con = sqlite3.connect(tmp_path / "s.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert dict(con.execute("SELECT key, value FROM mlsysopt_meta"))["schema_version"] == str(SCHEMA_VERSION)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("batched", [True, False])
def test_trials_read_back_through_optuna(tmp_path: Path, batched: bool) -> None:
    """The batched writer and Optuna's own one-trial API store the same trials."""
    store, sid = _study(tmp_path)
    store.batched = batched
    assert store.write_trials(sid, _trials(), {}) == [0, 1, 2, 3]
    study = optuna.load_study(study_name="run", storage=f"sqlite:///{tmp_path}/s.db")
    t = study.trials
    assert [x.state for x in t] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING]
    assert t[0].params == {"layers": 3, "lr": 0.01, "wide": True} and t[0].value == 0.75
    assert t[0].user_attrs == {"test_acc": 0.7, "param.op": "gin", "record": {"i": 0, "nan": None}, "key": "0"}
    assert t[1].value == math.inf and t[1].intermediate_values[0] == 1.5 and t[1].intermediate_values[2] == -math.inf
    assert math.isnan(t[1].intermediate_values[1])
    assert t[3].params == {"op": "gcn"} and t[3].datetime_complete is None
    assert study.best_trial.number == 1 and study.user_attrs["settings.budget"] == 4
    assert t[0].datetime_start is not None and abs((t[0].datetime_complete - t[0].datetime_start).total_seconds()) < 5


def test_keys_make_a_rewrite_exact(tmp_path: Path) -> None:
    store, sid = _study(tmp_path)
    store.write_trials(sid, _trials()[:2], {})
    again = [TrialRecord({"layers": 9}, [0.1], key="1"), TrialRecord({"layers": 9}, [0.2], key="4"),
             TrialRecord({"layers": 9}, [0.3], key="4")]  # fmt: skip
    assert store.write_trials(sid, again, {}) == [2]
    assert [t.params["layers"] for t in store.trials(sid)] == [3, 5, 9]


def test_a_parameter_of_another_kind_is_refused(tmp_path: Path) -> None:
    store, sid = _study(tmp_path)
    store.write_trials(sid, [TrialRecord({"x": 1}, [1.0])], {})
    with pytest.raises(StoreError, match="trial parameter 'x'"):
        store.write_trials(sid, [TrialRecord({"x": 1.5}, [1.0])], {})
    assert len(store.trials(sid)) == 1  # the refused batch wrote nothing


def test_study_names_follow_the_folder_and_never_collide(tmp_path: Path) -> None:
    store, _ = _study(tmp_path)
    assert store.create_study("run", "minimize", {})[1] == "run-2"
    assert store.create_study("run", "minimize", {})[1] == "run-3"


def test_a_store_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    _study(tmp_path)
    from mlsysopt.store.database import forget

    forget(parse_storage(f"{tmp_path}/s.db"))
    con = sqlite3.connect(tmp_path / "s.db")
    con.execute("UPDATE mlsysopt_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    con.execute("UPDATE mlsysopt_meta SET value = '9.0' WHERE key = 'written_by'")
    con.commit()
    con.close()
    spec = parse_storage(f"{tmp_path}/s.db")
    for attempt in (lambda: Store.probe(spec), lambda: Store.open(spec)):
        with pytest.raises(StoreError, match=r"newer mlsysopt \(mlsysopt 9.0\).*upgrade mlsysopt"):
            attempt()


def test_a_plain_optuna_store_is_adopted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/optuna.db"
    optuna.create_study(study_name="theirs", storage=url).optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    store = Store.open(parse_storage(url))
    sid, _ = store.create_study("ours", "minimize", {})
    store.write_trials(sid, [TrialRecord({"x": 0.5}, [0.5])], {})
    assert sorted(store.study_names().values()) == ["ours", "theirs"]
    assert len(optuna.load_study(study_name="theirs", storage=url).trials) == 2


def test_checkpoint_copies_replace_each_other(tmp_path: Path) -> None:
    store, sid = _study(tmp_path)
    assert store.load_checkpoint(sid) is None
    store.save_checkpoint(sid, "checkpoint.pt", b"one")
    store.save_checkpoint(sid, "checkpoint.pt", b"two")
    assert store.load_checkpoint(sid) == ("checkpoint.pt", b"two")
    store.delete_study(sid)
    assert store.study_names() == {}
