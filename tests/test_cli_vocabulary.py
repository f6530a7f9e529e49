"""One vocabulary across the CLI (issue 25): old spellings as aliases with a note, tables that fit or wrap in a
pipe, every label defined where it is printed, counts that hold ("1 core", --num-tasks), the project's own files
read back, a warning for more threads than cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import assert_user_error, run_inprocess
from mlsysopt.cli.common import apply_aliases
from mlsysopt.errors import InvalidOption
from mlsysopt.graph.generate import homogeneous_cluster, layered_dag
from mlsysopt.text import plural

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    layered_dag(12, num_types=1, seed=0).save(tmp_path / "g.npz")
    homogeneous_cluster(2).save(tmp_path / "c.json")
    return tmp_path


def test_old_spellings_are_read_as_the_new_ones_with_a_note(tmp_path: Path) -> None:
    assert apply_aliases(["serving", "serve", "--timeout-ms", "5"]) == ["serving", "serve", "--batch-timeout-ms", "5"]
    assert apply_aliases(["serving", "tune", "--timeout-ms=2,5"]) == ["serving", "tune", "--batch-timeout-ms=2,5"]
    assert apply_aliases(["serving", "tune", "--backend", "sim"]) == ["serving", "tune", "--engine", "sim"]
    assert apply_aliases(["nas", "search", "--backend", "ray"]) == ["nas", "search", "--backend", "ray"]  # its own
    with pytest.raises(InvalidOption, match="'serving tune' has no --backend .*--engine real | sim"):
        apply_aliases(["serving", "tune", "--backend", "ray"])
    ran = run_inprocess("serving", "tune", "--backend", "sim", "--rate", "1e-300", "--out", "x", cwd=tmp_path)
    line = assert_user_error(_last_line(ran), "--rate 1e-300")
    assert "warning: --backend is the old spelling of --engine" in ran.stderr, line
    assert not (tmp_path / "x").exists()


def _last_line(ran: object) -> object:
    """``ran`` with only its last stderr line (the notes before the error are checked separately)."""
    from cli_helpers import Ran

    assert isinstance(ran, Ran)
    return Ran(ran.returncode, ran.stdout, ran.stderr.strip().splitlines()[-1] + "\n")


def test_tables_fit_in_a_pipe_and_wrap_in_a_narrow_terminal(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["placement", "compare", "g.npz", "--cluster", "c.json", "--methods", "heft,giph_from_heft", "--seeds",
            "1", "--budget", "4"]  # fmt: skip
    monkeypatch.delenv("COLUMNS", raising=False)
    ran = run_inprocess(*args, "--out", "a", cwd=work)  # stdout is not a terminal: a pipe
    assert ran.returncode == 0, ran.stderr
    assert "giph_from_heft" in ran.stdout and "…" not in ran.stdout and "mean makespan (s)" in ran.stdout
    from mlsysopt.cli.common import console

    monkeypatch.setenv("COLUMNS", "60")  # a narrow terminal: cells wrap, nothing is cut
    monkeypatch.setattr(console, "_width", 60)  # rich reads COLUMNS when a console is made (already, here)
    ran = run_inprocess(*args, "--out", "b", cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert "…" not in ran.stdout and max(len(ln) for ln in ran.stdout.splitlines()) <= 60
    first_cells = "".join(ln.split("│")[1].strip() for ln in ran.stdout.splitlines() if ln.startswith("│"))
    assert "giph_from_heft" in first_cells  # folded over lines, every character kept


def test_labels_are_defined_in_help_output_and_the_glossary(tmp_path: Path) -> None:
    from mlsysopt.report.overview import glossary_section

    assert "n2 b8 t5ms i1 o1 seq: 2 instances" in " ".join(run_inprocess("serving", "tune", "--help").stdout.split())
    helped = " ".join(run_inprocess("nas", "search", "--help").stdout.split())
    assert "link [0, 1, 1, 2]" in helped and "gcn graph convolution" in helped
    spaces = run_inprocess("nas", "spaces")
    assert spaces.returncode == 0 and "gcn = graph convolution" in " ".join(spaces.stdout.split())
    glossary = glossary_section(["serving_real", "nas_graph"]).table
    assert {"configuration label", "cell (link, ops)", "GNN ops"} <= set(glossary)  # type: ignore[arg-type]
    ran = run_inprocess("serving", "tune", "--engine", "sim", "--budget", "2", "--confirm-top", "1", "--confirm-rounds",
                        "1", "--noise-windows", "2", "--requests", "50", "--out", "t", cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "configuration: n2 b8 t5ms i1 o1 seq = 2 instances" in " ".join(ran.stdout.split())
    result = json.loads((tmp_path / "t" / "result.json").read_text())
    assert result["stopped_by"] == result["stopped"] == "budget"


def test_counts_hold() -> None:
    assert plural(1, "core") == "1 core" and plural(2, "core") == "2 cores" and plural(1000, "task") == "1,000 tasks"
    exact = run_inprocess("graph", "info", "montage", "--num-tasks", "120", "--json")
    assert exact.returncode == 0 and json.loads(exact.stdout)["tasks"] == 120 and "warning" not in exact.stderr
    near = run_inprocess("graph", "info", "montage", "--num-tasks", "100", "--json")
    assert near.returncode == 0 and json.loads(near.stdout)["tasks"] == 101
    assert "warning: recipe 'montage' built 101 tasks for num_tasks=100: the nearest size it can build" in near.stderr


def test_a_device_map_reads_back_as_a_placement(work: Path) -> None:
    import numpy as np

    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.ir import CompGraph
    from mlsysopt.placement import device_map

    graph, cluster = CompGraph.load(work / "g.npz"), DeviceCluster.load(work / "c.json")
    placement = np.arange(graph.num_nodes) % cluster.num_devices
    (work / "device_map.json").write_text(json.dumps(device_map(graph, cluster, placement)))
    plain = {name: cluster.names[int(d)] for name, d in zip(graph.names, placement, strict=True)}
    (work / "p.json").write_text(json.dumps(plain))
    for name, out in (("device_map.json", "a"), ("p.json", "b")):
        ran = run_inprocess("graph", "simulate", "g.npz", "--cluster", "c.json", "--placement", name, "--out", out,
                            cwd=work)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
    a, b = (json.loads((work / o / "result.json").read_text()) for o in "ab")
    assert a["makespan"] == b["makespan"] and a["placement"] == b["placement"] == plain


def test_more_threads_than_cores_warn(tmp_path: Path) -> None:
    ran = run_inprocess("costmodel", "train", "--data", "nowhere", "--threads", "64", "--out", "x", cwd=tmp_path)
    assert ran.returncode == 2
    assert "warning: --threads 64 = 64 threads on this machine's" in ran.stderr and "they will share them" in ran.stderr
