"""The ``mlsysopt`` command runs with one string-hash seed (``src/mlsysopt/hashseed.py``), so saga's tie-breaks and
every result built on them are the same in every run of a command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run
from mlsysopt.graph.generate import layered_dag, random_cluster

# what a process sees after the entry point's check: the variable, whether str hashes are salted, one str hash
PROBE = (
    "import os, sys; from mlsysopt.hashseed import fixed_hash_seed; fixed_hash_seed(); "
    "print(os.environ.get('PYTHONHASHSEED'), sys.flags.hash_randomization, hash('mlsysopt'))"
)


def _probe(**env: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True, check=True
    )
    return proc.stdout.split()


def test_the_command_fixes_the_hash_seed_unless_the_environment_sets_one() -> None:
    first, second = _probe(), _probe()
    assert first == second and first[:2] == ["0", "0"]  # re-run once with PYTHONHASHSEED=0: hashes are not salted
    salted = [_probe(PYTHONHASHSEED="random") for _ in range(2)]
    assert [s[:2] for s in salted] == [["random", "1"]] * 2 and salted[0][2] != salted[1][2]  # the user's choice
    seven = [_probe(PYTHONHASHSEED="7") for _ in range(2)]
    assert seven[0] == seven[1] and seven[0][0] == "7" and seven[0][2] != first[2]  # another fixed seed, as given


def _figures(result: Path) -> dict:
    """What a placement run decided (no clock readings)."""
    r = json.loads(result.read_text())
    return {"history": r["history"], "portfolio": r["info"]["portfolio"]["makespans"], "start": r["comparison"]}


def test_two_runs_of_a_placement_with_saga_ties_give_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 12 tasks of few distinct costs on 5 devices: saga's ETF meets ties, which it broke in the order Python salted
    # per process (under PYTHONHASHSEED 0, 1, 220613 and 7734 this problem's portfolio, start or search differed)
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # as a user's shell: the command fixes it itself
    layered_dag(12, alpha=0.3, p=0.3, num_types=3, seed=2).save(tmp_path / "g.npz")
    random_cluster(5, num_types=3, seed=2).save(tmp_path / "c.json")
    outs = []
    for name in ("a", "b"):
        args = ("placement", "place", "g.npz", "--cluster", "c.json", "--budget", "30", "--seed", "4", "--out", name)
        proc = run(*args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        outs.append(_figures(tmp_path / name / "result.json"))
    assert outs[0] == outs[1]
