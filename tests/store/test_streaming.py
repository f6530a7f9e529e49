"""``runs show`` and ``runs export`` stream a large study: memory stays bounded by a page of trials, the output is
complete and the same, byte for byte, as the whole study read at once would give (issue #35: a 100k-trial study took
37-46 s and 2.5 GB). Speed figures are in benchmarks/store.py, not here."""

from __future__ import annotations

import csv
import json
import math
import tracemalloc
from pathlib import Path

import pytest

from cli_helpers import run_inprocess
from mlsysopt.io import dumps
from mlsysopt.store import Store, TrialRecord, parse_storage
from mlsysopt.store.query import best_trials, export_run, run_details, trial_row

TRIALS = 2_000
PAD = "x" * 1_000  # each trial's record ~1 KB: the whole study is ~7 MB of records once read and written


def _big_trial(i: int) -> TrialRecord:
    value = float((i * 7919) % TRIALS)  # a permutation: the best trials are spread over the study
    return TrialRecord({"i": i, "lr": 0.001 * (i % 7 + 1)}, [value], key=str(i), record={"i": i, "pad": PAD},
                       attrs={"acc": i / TRIALS})  # fmt: skip


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store holding one study ``big`` of :data:`TRIALS` trials (written in batches, a few seconds) and a
    one-trial study ``small``."""
    folder = tmp_path_factory.mktemp("big")
    store = Store.open(parse_storage(str(folder / "s.db")))
    sid, _ = store.create_study("big", "minimize", {"mlsysopt.command": "test", "mlsysopt.status": "done"})
    for start in range(0, TRIALS, 1_000):
        store.write_trials(sid, [_big_trial(i) for i in range(start, start + 1_000)], {})
    small, _ = store.create_study("small", "minimize", {"mlsysopt.command": "test"})
    store.write_trials(small, [TrialRecord({"i": 0}, [1.0], record={"i": 0}, attrs={"acc": 0.0})], {})
    for fmt in ("json", "csv"):  # the imports of a first export and show are not what is measured
        assert run_inprocess("runs", "export", "small", "--storage", folder / "s.db", "--format", fmt).returncode == 0
    assert run_inprocess("runs", "show", "small", "--storage", folder / "s.db").returncode == 0
    return folder


def _peak(fn: object, *args: object) -> tuple[object, int]:
    """``fn(*args)`` and the peak Python memory it allocated on top of what was there (bytes)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn(*args)  # type: ignore[operator]
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


#: Peak memory an export or a show may add, whatever the study's size: a few pages of trials (the whole 2,000-trial
#: study read at once, as the export did before it streamed, takes ~47 MiB for CSV and ~29 MiB for JSON, 3-5x this
#: bound; a page of 200 takes ~5.5 MiB).
BOUND = 10 * 2**20


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_runs_export_streams_a_large_study_in_bounded_memory(big: Path, fmt: str) -> None:
    out = big / f"out.{fmt}"
    ran, peak = _peak(run_inprocess, "runs", "export", "big", "--storage", big / "s.db", "--format", fmt,
                      "--out", out)  # fmt: skip
    assert ran.returncode == 0, ran.stderr  # type: ignore[attr-defined]
    assert peak < BOUND, f"export of {TRIALS:,} trials peaked at {peak / 2**20:.1f} MiB"
    if fmt == "json":
        data = json.loads(out.read_text())
        assert [t["number"] for t in data["trials"]] == list(range(TRIALS))
        assert data["run"]["trials"] == data["run"]["complete"] == TRIALS
        assert all(t["record"]["pad"] == PAD for t in data["trials"])
    else:
        with open(out, newline="") as f:
            rows = list(csv.DictReader(f))
        assert [int(r["number"]) for r in rows] == list(range(TRIALS))
        assert {"value", "params.i", "params.lr", "attrs.acc", "duration_s"} <= set(rows[0])
    assert not list(big.glob(".*.tmp"))  # the temp file was renamed into place


def test_runs_show_reads_only_the_best_trials_of_a_large_study(big: Path) -> None:
    ran, peak = _peak(run_inprocess, "runs", "show", "big", "--storage", big / "s.db", "--trials", "5")
    assert ran.returncode == 0, ran.stderr  # type: ignore[attr-defined]
    assert peak < BOUND, f"show of {TRIALS:,} trials peaked at {peak / 2**20:.1f} MiB"
    assert f"best 5 of {TRIALS} trial(s)" in ran.stdout  # type: ignore[attr-defined]
    assert f"{TRIALS} complete of {TRIALS}" in ran.stdout  # type: ignore[attr-defined]


def _old_export(store: Store, sid: int, fmt: str) -> str:
    """The export as it was before streaming: every trial read at once, the whole text built in memory."""
    import io

    from mlsysopt.store.query import _cell

    d = run_details(store, sid)
    if fmt == "json":
        data = {"run": d["summary"].to_dict(), "attrs": d["attrs"], "settings": d["settings"],
                "direction": d["direction"], "trials": [trial_row(t, True) for t in d["trials"]]}  # fmt: skip
        return dumps(data) + "\n"
    rows = [trial_row(t) for t in d["trials"]]
    columns: list[str] = []
    for r in rows:
        columns += [c for c in r if c not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns or ["number"], extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: _cell(v) for k, v in r.items()})
    return buf.getvalue()


def _mixed_trial(i: int, v: float | None) -> TrialRecord:
    params = {"i": i, **({"op": "gin"} if i % 3 else {"w": 1.5})}  # a string param goes to the attributes
    return TrialRecord(params, None if v is None else [v], key=str(i), state="running" if v is None else "complete",
                       record={"i": i, "nan": math.nan}, intermediate={0: 1.0, 1: math.nan} if i % 4 == 0 else {},
                       attrs={f"a{i % 2}": i})  # fmt: skip


@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_streamed_output_is_what_the_whole_study_gives(tmp_path: Path, direction: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Pages of 3 over trials of every kind (inf, NaN, failed, running, other params): the same bytes, the same best."""
    import mlsysopt.store.reads as reads

    monkeypatch.setattr(reads, "TRIAL_PAGE", 3)
    monkeypatch.setattr(reads.StoreReads.iter_trials, "__defaults__", (3, None))
    store = Store.open(parse_storage(str(tmp_path / "s.db")))
    sid, _ = store.create_study("mixed", direction, {"mlsysopt.command": "test", "settings.budget": 9})
    values = [0.5, math.inf, -math.inf, math.nan, None, 0.5, 2.0, -1.0, 3.0, 1e-9, -math.inf]
    store.write_trials(sid, [_mixed_trial(i, v) for i, v in enumerate(values)], {})
    for fmt in ("json", "csv"):
        assert export_run(store, sid, fmt) == _old_export(store, sid, fmt), fmt
    everything = run_details(store, sid)["trials"]
    ranked = sorted((t for t in everything if t.values), key=lambda t: t.values[0], reverse=direction == "maximize")
    for n in (0, 1, 4, 20):
        assert [t.number for t in best_trials(store, sid, direction, n)] == [t.number for t in ranked[:n]], n
    empty, _ = store.create_study("empty", direction, {})
    for fmt in ("json", "csv"):
        assert export_run(store, empty, fmt) == _old_export(store, empty, fmt), fmt
