"""NAS-Bench-Graph space: look-ups agree with the raw packaged tables; progression; whole-table views."""

from __future__ import annotations

import math
import pickle

import nas_bench_graph
import numpy as np
import pytest

from mlsysopt.errors import InvalidArchitecture, InvalidDataset
from mlsysopt.nas.spaces import NASBENCH_GRAPH_DATASETS, Arch, NasBenchGraphSpace
from mlsysopt.nas.spaces.nasbench_graph import load_table


@pytest.mark.parametrize("dataset", NASBENCH_GRAPH_DATASETS)
def test_sampled_archs_agree_with_the_raw_table(dataset: str) -> None:
    space = NasBenchGraphSpace(dataset)
    raw = nas_bench_graph.light_read(dataset)  # an independent load, not the space's cache
    assert len(space.table) == len(raw) == (2021 if dataset == "proteins" else 26206)
    rng = np.random.default_rng(0)
    for b in range(1, 5):
        for _ in range(25):
            arch = space.sample(rng, b)
            link, ops = space.cell(arch)
            assert ops[b:] == ["skip"] * (4 - b) and not all(o == "skip" for o in ops)
            entry = raw[nas_bench_graph.Arch(link, ops).valid_hash()]
            ev = space.evaluate(arch, seed=3)
            assert ev.ok and ev.arch == arch
            assert ev.perf == pytest.approx(float(entry["valid_perf"]))
            assert ev.test_perf == pytest.approx(float(entry["perf"]))
            assert ev.resources["params"] == pytest.approx(float(entry["para"]) * 1e6)
            assert ev.resources["latency_ms"] == pytest.approx(float(entry["latency"]) * 1000)
            assert ev.resources == space.resources(arch) and 0 <= ev.cost_s < 1
            assert set(ev.resources) == set(space.resource_names)
            assert all(math.isfinite(v) and v > 0 for v in ev.resources.values())


def test_progression_is_skip_padding() -> None:
    space = NasBenchGraphSpace("cora")
    assert space.decisions(1) == [9, 9] and space.decisions(4) == [9, 9, 9, 9, 9]
    assert space.decision_names(2) == ["link", "op1", "op2"]
    a1 = space.arch_from_names([0, 1, 2, 3], ["gcn"])
    a4 = space.arch_from_names([0, 1, 2, 3], ["gcn", "skip", "skip", "skip"])
    assert a1.blocks == 1 and a4.blocks == 4
    assert space.key(a1) == space.key(a4)  # the same cell at two block counts ...
    assert np.array_equal(space.encode(a1), space.encode(a4))  # ... encodes the same
    assert space.evaluate(a1).perf == space.evaluate(a4).perf
    assert space.decode(a1)["ops"] == ["gcn", "skip", "skip", "skip"]
    assert [len(list(space.iter_archs(b))) for b in (1, 2)] == [24, 380]


def test_bad_archs_and_names() -> None:
    space = NasBenchGraphSpace("cora")
    skip = space.ops.index("skip")
    with pytest.raises(InvalidArchitecture, match="every computing node is skip"):
        space.check(Arch((0, skip), 1))
    with pytest.raises(InvalidArchitecture, match="every computing node is skip"):
        space.evaluate(Arch((3, skip, skip), 2))
    with pytest.raises(InvalidArchitecture, match="unknown op.*'gcnn'.*choose from: gat"):
        space.arch_from_names([0, 1, 2, 3], ["gcnn"])
    with pytest.raises(InvalidArchitecture, match="unknown link"):
        space.arch_from_names([0, 2, 2, 2], ["gcn"])
    with pytest.raises(InvalidArchitecture, match="must be in 0..8"):
        space.evaluate(Arch((0, 9), 1))
    proteins = NasBenchGraphSpace("proteins")
    assert proteins.ops == ("gcn", "sage", "arma", "fc", "skip") and proteins.decisions(1) == [9, 5]
    with pytest.raises(InvalidArchitecture, match="unknown op.*'gat'"):
        proteins.arch_from_names([0, 1, 2, 3], ["gat"])
    with pytest.raises(InvalidDataset, match="choose from: cora"):
        NasBenchGraphSpace("../../etc/passwd")  # never reaches the unpickler
    with pytest.raises(InvalidDataset):
        load_table("Cora")


def test_table_views_for_regret() -> None:
    space = NasBenchGraphSpace("cora")
    stats = space.table_stats()
    assert stats["n_archs"] == 26206 and 0 <= stats["load_s"] < 30
    lat = [float(e["latency"]) * 1000 for e in space.table.values()]
    params = [float(e["para"]) * 1e6 for e in space.table.values()]
    assert stats["median_latency_ms"] == pytest.approx(np.median(lat))
    assert stats["median_params"] == pytest.approx(np.median(params))

    def fits(r: dict[str, float]) -> bool:
        return r["latency_ms"] <= stats["median_latency_ms"] and r["params"] <= stats["median_params"]

    best = space.best_feasible(fits)
    assert best is not None and fits(best.resources)
    assert best.test_perf == space.best_feasible_test(fits)
    assert space.evaluate(best.arch).test_perf == best.test_perf  # its representative arch looks it up again
    everything = max(float(e["perf"]) for e in space.table.values())
    assert best.test_perf <= everything == space.best_feasible_test(lambda r: True)
    assert space.best_feasible_test(lambda r: r["params"] < 0) is None


def test_iterating_the_whole_table() -> None:
    space = NasBenchGraphSpace("proteins")  # 2,021 cells: fast to enumerate
    archs = list(space.iter_archs())
    assert len(archs) == len(space.table) == 2021
    assert {space.key(a) for a in archs} == set(space.table)


def test_pickles_without_the_table() -> None:
    space = NasBenchGraphSpace("pubmed")
    _ = space.table
    rng = np.random.default_rng(1)
    keys = {a: space.key(a) for a in (space.sample(rng) for _ in range(500))}  # fills the process-wide key memo
    blob = pickle.dumps(space)
    assert len(blob) < 10_000  # the 2 MB table and the key memo stay behind; each process has its own
    assert all(k == nas_bench_graph.Arch(*space.cell(a)).valid_hash() for a, k in keys.items())  # memo is exact
    clone = pickle.loads(blob)
    arch = space.sample(np.random.default_rng(0))
    assert clone.evaluate(arch).perf == space.evaluate(arch).perf
