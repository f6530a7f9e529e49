"""``mlsysopt nas search | spaces`` run for real with tiny budgets, resume, failed evaluations, bad input."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_helpers import PNG_MAGIC, assert_user_error, run_inprocess

# The CLI runs in this process (run_inprocess: no interpreter start, and EPNAS's transfer prior for cora, ~15 s to
# train, is made once per process) unless a test needs a process of its own (one it kills, one holding a lock).
CORA = ("nas", "search", "--space", "nasbench-graph:cora")
MEDIANS = ("--max-latency-ms", "3.7309", "--max-params", "1197575")  # cora's median latency and params
TINY_CNN = ("--epochs", "1", "--max-blocks", "1")


def _result(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


def test_epnas_on_nasbench_graph_writes_every_evaluation_the_plots_and_resumes(tmp_path: Path) -> None:
    args = (*CORA, *MEDIANS, "--seed", "3", "--out", "r")
    proc = run_inprocess(*args, "--budget", "8", "--method", "epnas", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "r"
    res = _result(out)
    assert res["settings"]["method"] == "epnas" and res["settings"]["budget"] == 8
    assert res["settings"]["constraints"]["limits"] == {"max_latency_ms": 3.7309, "max_params": 1197575.0}
    assert res["evaluated"] == len(res["evaluations"]) == 8 and res["failed"] == 0
    for ev in res["evaluations"]:  # hard mode: only feasible architectures are ever evaluated
        assert ev["feasible"] and ev["ok"] and set(ev["resources"]) == {"params", "latency_ms"}
        assert all(v <= 0 for v in ev["constraints"].values())
        assert ev["decoded"]["space"] == "nasbench-graph:cora" and len(ev["decoded"]["ops"]) == 4
    best = res["best"]
    assert best["perf"] == max(ev["perf"] for ev in res["evaluations"])
    assert res["best_decoded"] == best["decoded"] and res["best_test_perf"] == best["test_perf"]
    assert res["space"]["table"]["n_archs"] == 26206
    assert math.isclose(res["regret"], res["best_feasible_test_in_table"] - best["test_perf"])
    assert 0 <= res["regret"] < 0.3
    for png in ("pareto.png", "best_so_far.png"):
        assert (out / png).read_bytes()[:8] == PNG_MAGIC
    assert (out / "checkpoint.pt").is_file() and json.loads((out / "settings.json").read_text())["seed"] == 3
    assert "best architecture" in proc.stdout and "regret" in proc.stdout
    # a second run into the same folder must not overwrite it; --resume continues it, also with a larger budget
    assert_user_error(run_inprocess(*args, "--budget", "8", cwd=tmp_path), "checkpoint.pt exists", "--resume")
    proc = run_inprocess(*args, "--budget", "10", "--resume", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    again = _result(out)
    assert again["resumed_from"] == 8 and again["evaluated"] == 10
    assert [e["arch"] for e in again["evaluations"][:8]] == [e["arch"] for e in res["evaluations"]]
    other = run_inprocess(*CORA, *MEDIANS, "--seed", "4", "--out", "r", "--resume", cwd=tmp_path)
    assert_user_error(other, "other settings", "seed")
    # the best cell exported: its spec and table entry
    proc = run_inprocess("nas", "export", "r", "--out", "x", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    arch = json.loads((tmp_path / "x" / "architecture.json").read_text())
    assert arch["link"] == again["best"]["decoded"]["link"] and arch["ops"] == again["best"]["decoded"]["ops"]
    assert arch["valid_hash"] == again["best"]["decoded"]["key"]
    assert arch["table_entry"]["perf"] == again["best"]["test_perf"] and "table entry" in proc.stdout
    assert_user_error(run_inprocess("nas", "export", "r", "--out", "r", cwd=tmp_path), "the search's own folder")


def test_a_timeout_stops_the_search_checkpointed_and_resume_finishes_it(tmp_path: Path) -> None:
    args = (*CORA, *MEDIANS, "--budget", "6", "--out", "r")
    proc = run_inprocess(*args, "--timeout", "0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "stopped by --timeout" in proc.stdout and "--resume" in proc.stdout
    res = _result(tmp_path / "r")
    assert res["stopped_by"] == "timeout" and res["evaluated"] == 0 and res["settings"]["timeout"] == 0
    proc = run_inprocess(*args, "--resume", cwd=tmp_path)  # the timeout may change on resume (here: none)
    assert proc.returncode == 0, proc.stderr
    res = _result(tmp_path / "r")
    assert res["stopped_by"] == "budget" and res["evaluated"] == 6 and res["settings"]["timeout"] is None


def test_constraints_nobody_meets_return_nothing_and_say_so(tmp_path: Path) -> None:
    proc = run_inprocess(*CORA, "--method", "random", "--max-params", "10", "--budget", "8", "--out", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    res = _result(tmp_path / "r")
    assert res["best"] is None and res["evaluations"] == []
    assert "never met params <= 10" in res["message"] and "no architecture returned" in proc.stdout
    assert res["regret"] == res["best_feasible_test_in_table"] is None  # nothing in the table fits either
    assert (tmp_path / "r" / "pareto.png").read_bytes()[:8] == PNG_MAGIC


def test_soft_mode_evaluates_and_may_return_an_infeasible_architecture(tmp_path: Path) -> None:
    args = (*CORA, "--method", "random", "--constraint-mode", "soft", "--max-params", "10", "--budget", "8")
    proc = run_inprocess(*args, "--out", "r", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    res = _result(tmp_path / "r")
    assert res["evaluated"] == 8 and not any(ev["feasible"] for ev in res["evaluations"])
    assert res["best"] is not None and not res["best"]["feasible"] and "violates (soft)" in res["message"]


def test_digits_trains_for_real_on_two_workers(tmp_path: Path) -> None:
    proc = run_inprocess("nas", "search", "--space", "digits", "--method", "random", *TINY_CNN, "--budget", "2",
                         "--workers", "2", "--max-flops", "1e7", "--min-intensity", "0.1", "--out", "d",
                         cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    res = _result(tmp_path / "d")
    assert res["evaluated"] == 2 and res["failed"] == 0
    ev = res["best"]
    assert set(ev["resources"]) == {"params", "flops", "latency_ms", "intensity"} and ev["feasible"]
    assert 0.1 < ev["perf"] <= 1 and 0 < ev["test_perf"] <= 1
    assert ev["decoded"]["blocks"][0].keys() == {"op_a", "op_b", "width"}
    assert res["regret"] is None and res["space"]["options"]["epochs"] == 1
    assert (tmp_path / "d" / "pareto.png").read_bytes()[:8] == PNG_MAGIC
    # the best model exported, and checked by the export itself against the recorded accuracy
    proc = run_inprocess("nas", "export", "d", "--out", "x", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"reproduced by ONNX Runtime: validation {ev['perf']:.4g}, test {ev['test_perf']:.4g}" in proc.stdout
    files = {p.name for p in (tmp_path / "x").iterdir()}
    assert {"model.onnx", "model_state_dict.pt", "architecture.json", "result.json"} <= files


def test_nan_and_crashing_evaluations_are_recorded_and_the_search_goes_on(tmp_path: Path) -> None:
    proc = run_inprocess("nas", "search", "--space", "digits", "--method", "random", *TINY_CNN, "--lr", "1e30",
                         "--budget", "2", "--out", "n", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    res = _result(tmp_path / "n")
    assert res["evaluated"] == 2 and res["failed"] == 2 and res["best"] is None
    assert all(not ev["ok"] and ev["perf"] is None and "nan" in ev["error"] for ev in res["evaluations"])
    assert "all 2 evaluation(s) failed" in res["message"]
    folder = _image_folder(tmp_path / "img", corrupt=True)
    proc = run_inprocess("nas", "search", "--space", f"cifar10:{folder}", "--method", "random", *TINY_CNN,
                         "--budget", "2", "--out", "c", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    res = _result(tmp_path / "c")
    assert res["failed"] == 2 and all("cannot read image" in ev["error"] for ev in res["evaluations"])
    assert all(ev["extra"]["retried"] for ev in res["evaluations"])


def _image_folder(root: Path, corrupt: bool = False) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for part in ("train", "test"):
        for cls in ("cat", "dog"):
            (root / part / cls).mkdir(parents=True)
            for i in range(3):
                Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(root / part / cls / f"{i}.png")
    if corrupt:
        (root / "train" / "dog" / "9.png").write_bytes(b"not a png")
    return root


def test_spaces_lists_every_dataset_with_table_statistics(tmp_path: Path) -> None:
    proc = run_inprocess("nas", "spaces", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name in ("nasbench-graph:cora", "nasbench-graph:proteins", "26,206", "2,021", "digits", "cifar10"):
        assert name in proc.stdout, name


BAD = [  # the first five load torch; the rest fail before that
    (["--space", "nasbench-graph:nope"], ["unknown NAS-Bench-Graph dataset 'nope'", "cora"]),
    (["--space", "digits", "--ops", "conv3x3,conv7x7"], ["unknown op", "conv7x7"]),
    (["--space", "cifar10:{tmp}/flat"], ["not a CIFAR-10 image folder", "train/<class>"]),
    (["--max-flops", "1e6"], ["constraint max_flops needs resource 'flops'", "nasbench-graph:cora"]),
    (["--epochs", "2", "--lr", "0.1"], ["--epochs, --lr apply only to the CNN spaces", "nasbench-graph:cora"]),
    (["--budget", "0"], ["--budget must be >= 1"]),
    (["--max-params", "-5"], ["--max-params must be a number > 0"]),
    (["--constraint-mode", "medium"], ["unknown --constraint-mode 'medium'", "hard, soft"]),
    (["--method", "darts"], ["unknown NAS method 'darts'", "epnas"]),
    (["--space", "digits", "--ops", " , "], ["--ops ' , ' names no op"]),
    (["--resume"], ["--resume: no checkpoint at", "checkpoint.pt"]),
    (["--backend", "ray", "--address", "127.0.0.9:1"], ["--address 127.0.0.9:1: no Ray head answers there"]),
    (["--address", "127.0.0.9:1"], ["--address is for --backend ray"]),
]


@pytest.mark.parametrize(("args", "needles"), BAD)
def test_bad_input_gives_one_clear_line(tmp_path: Path, args: list[str], needles: list[str]) -> None:
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.png").write_bytes(b"")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--budget" not in args:
        args += ["--budget", "4"]
    assert_user_error(run_inprocess("nas", "search", *args, "--out", "r", cwd=tmp_path), *needles)
    assert not (tmp_path / "r").exists()  # a refused input leaves no folder and no file


def test_a_busy_run_folder_is_refused_and_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "r"
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import time\nfrom mlsysopt.io import RunDir\nwith RunDir({str(out)!r}, {{}}, "
         "checkpoint=None):\n    print('locked', flush=True)\n    time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = sorted(p.name for p in out.iterdir())
        proc = run_inprocess(*CORA, *MEDIANS, "--budget", "4", "--out", "r", cwd=tmp_path)
        assert_user_error(proc, f"--out {out.name} is in use by process {holder.pid}")
        assert sorted(p.name for p in out.iterdir()) == before  # nothing written into the busy folder
    finally:
        holder.kill()
        holder.wait()


def test_a_search_killed_with_sigkill_resumes_to_the_same_result(tmp_path: Path) -> None:
    """kill -9 after the first checkpoint; --resume finishes it exactly as an uninterrupted run would."""
    args = ("nas", "search", "--space", "digits", "--method", "random", *TINY_CNN, "--budget", "3", "--seed", "1")
    whole = run_inprocess(*args, "--out", "whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    env = {k: v for k, v in os.environ.items() if k != "MLSYSOPT_DEBUG"}
    victim = subprocess.Popen([sys.executable, "-m", "mlsysopt.cli", *args, "--out", "cut"], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    ckpt = tmp_path / "cut" / "checkpoint.pt"
    deadline = time.monotonic() + 120
    while not ckpt.exists() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert ckpt.exists() and not (tmp_path / "cut" / "result.json").exists(), "killed before or after the search"
    proc = run_inprocess(*args, "--out", "cut", "--resume", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cut, ref = _result(tmp_path / "cut"), _result(tmp_path / "whole")
    assert 1 <= cut["resumed_from"] < 3 and cut["evaluated"] == 3
    key = ("arch", "perf", "test_perf", "ok")
    assert [[e[k] for k in key] for e in cut["evaluations"]] == [[e[k] for k in key] for e in ref["evaluations"]]
    assert cut["best"]["arch"] == ref["best"]["arch"]
