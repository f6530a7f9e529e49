"""A user's own runtime table (costmodel/data/table.py): CSV or Parquet + graphs as .py / ONNX / .npz, bad inputs;
then the rank ensemble (costmodel/rank_ensemble.py) of two models trained on it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import assert_user_error, run_inprocess
from mlsysopt.costmodel import RankEnsemble, TrainConfig, ensemble, evaluate, load_trainer, predict, train
from mlsysopt.costmodel.data import load_dataset
from mlsysopt.costmodel.rank_ensemble import combine, standardised, weight_grid
from mlsysopt.errors import InvalidDataFile

NET = """import torch
from torch import nn


def model():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, {w}, 3, padding=1)), (
        torch.randn(1, 3, 12, 12),
    )
"""


_CONVERTED: dict[str, bytes] = {}  # g1.npz and g2.onnx, built once per module (the same models in every table)


def _converted(py: Path, name: str, convert: Callable[[Path, Path], object]) -> None:
    """Replace ``py`` by ``name`` made by ``convert(py, out)`` (the first time; later tables copy its bytes: the
    .py of a graph is the same in every table, and a CompGraph from a .py file takes a child process)."""
    out = py.with_name(name)
    if name not in _CONVERTED:
        convert(py, out)
        _CONVERTED[name] = out.read_bytes()
    out.write_bytes(_CONVERTED[name])
    py.unlink()


def _table_root(root: Path, graphs: int = 6, configs: int = 10, parquet: bool = False) -> Path:
    """Graphs ``g0..`` as .py files (and g1 as a CompGraph .npz, g2 as ONNX) with a runtime that the knobs set."""
    import torch

    from mlsysopt.graph.importers.onnx import export_onnx
    from mlsysopt.graph.importers.source import resolve_source

    (root / "graphs").mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = []
    for g in range(graphs):
        py = root / "graphs" / f"g{g}.py"
        py.write_text(NET.format(w=4 + g))
        if g == 1:  # the same model as a saved CompGraph
            _converted(py, "g1.npz", lambda py, out: resolve_source(f"{py}:model").graph().save(out))
        if g == 2:  # ... and as ONNX (node names differ: graph-level knobs only)
            _converted(py, "g2.onnx", lambda py, out: export_onnx(*resolve_source(f"{py}:model").pytorch(), out))
        for c in range(configs):
            a, b, t = int(rng.integers(0, 2)), int(rng.integers(0, 2)), int(rng.integers(1, 3))
            rt = 1.0 + 0.5 * a + 0.2 * b - 0.1 * t * a + 0.01 * rng.random()
            rows.append({"graph": f"g{g}", "config": c, "runtime": rt, "_0.channels_last": a,
                         "_2.channels_last": b, "threads": t})  # fmt: skip
    for r in rows:  # the ONNX graph has other node names: its cells for the fx names stay empty
        if r["graph"] == "g2":
            r["_0.channels_last"] = r["_2.channels_last"] = None
    if parquet:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), root / "runtimes.parquet")
    else:
        keys = list(rows[0])
        lines = [",".join("" if r[k] is None else str(r[k]) for k in keys) for r in rows]
        (root / "runtimes.csv").write_text(",".join(keys) + "\n" + "\n".join(lines) + "\n")
    del torch
    return root


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _table_root(tmp_path_factory.mktemp("table") / "mine")


def test_a_table_becomes_layout_records_with_one_slot_per_knob(table: Path) -> None:
    names = {s: load_dataset(table, s).names for s in ("train", "valid", "test")}
    assert sorted(g for split in names.values() for g in split) == [
        f"g{i}" for i in range(6)
    ]  # every graph in one split
    ds = load_dataset(table / "runtimes.csv", "train")
    recs = {ds.names[i]: ds.record(i) for i in range(len(ds))}
    rec = next(r for name, r in recs.items() if name not in ("g1", "g2"))
    assert rec.task == "layout" and rec.num_configs == 10 and rec.x.shape[1] == 140
    # configurable: the graph's first node (graph-level 'threads') and the two named convolutions
    assert rec.config_node_ids.size == 3
    assert ds.slots == {"channels_last": 0, "threads": 1}
    assert set(np.unique(rec.node_config_feat[:, :, 1])) <= {1.0, 2.0}  # threads on every configurable node
    if "g2" in recs:  # the ONNX graph: only the graph-level knob applies, on its first node as on the others'
        assert recs["g2"].config_node_ids.size == 1


def test_a_table_of_graph_level_knobs_puts_them_on_every_node_or_warns_when_too_many(tmp_path: Path,
                                                                                    monkeypatch) -> None:  # fmt: skip
    """Configurations that differ only in graph-level knobs must not be pruned to the graph's input node."""
    import mlsysopt.costmodel.data.table as table_mod
    from mlsysopt.errors import MlsysoptWarning

    rows = "".join(f"{g},{c},{1 + 0.1 * c},{1 + c % 2},{c // 2},{s}\n" for g, s in (("a", "train"), ("b", "test"))
                   for c in range(4))  # fmt: skip
    root = _write(tmp_path / "t", "graph,config,runtime,threads,parallel,split\n" + rows, graphs=("a", "b"))
    rec = load_dataset(root, "train").record(0)
    assert rec.config_node_ids.size == rec.num_nodes > 3
    assert (rec.node_config_feat[:, :, 1] == rec.node_config_feat[:, :1, 1]).all()  # one value per configuration
    assert sorted(rec.node_config_feat[:, 0, 1]) == [1.0, 1.0, 2.0, 2.0]  # threads in its slot (sorted names)
    monkeypatch.setattr(table_mod, "MAX_SPREAD_CELLS", 10)
    with pytest.warns(MlsysoptWarning, match="graph 'a'.*--prune-hops none"):
        rec = load_dataset(root, "train").record(0)
    assert rec.config_node_ids.size == 1


def test_csv_and_parquet_give_the_same_records(table: Path, tmp_path: Path) -> None:
    pq_root = _table_root(tmp_path / "pq", parquet=True)
    for split in ("train", "test"):
        a, b = load_dataset(table, split), load_dataset(pq_root, split)
        assert a.names == b.names
        for i in range(len(a)):
            ra, rb = a.record(i), b.record(i)
            np.testing.assert_allclose(ra.runtime, rb.runtime)
            np.testing.assert_array_equal(ra.node_config_feat, rb.node_config_feat)


def test_models_train_on_the_user_s_table(table: Path, tmp_path: Path) -> None:
    gst = train(table, tmp_path / "gst", TrainConfig(epochs=2, finetune_epochs=1, configs_per_graph=6), hidden=8)
    assert gst["test"] is not None and np.isfinite(gst["test"]["opa"])
    assert gst["data"].startswith("as given")
    lgb = train(table, tmp_path / "lgb", TrainConfig(mode="lightgbm"))
    assert lgb["test"]["opa"] > 0.6  # the knobs set the runtime


def _write(root: Path, text: str, graphs: tuple[str, ...] = ("g",)) -> Path:
    (root / "graphs").mkdir(parents=True, exist_ok=True)
    for g in graphs:
        (root / "graphs" / f"{g}.py").write_text(NET.format(w=4))
    (root / "runtimes.csv").write_text(text)
    return root


@pytest.mark.parametrize(
    ("csv", "needle"),
    [
        ("graph,time,_0.x\ng,1,0\n", "no 'runtime' column"),
        ("graph,runtime,_0.x\ng,1,0\ng,-2,1\n", "column 'runtime' row 3 is -2.0"),
        ("graph,runtime,_0.x\ng,1,0\ng,,1\n", "column 'runtime' row 3 is empty"),
        ("graph,runtime,_0.x\ng,1,0\ng,2,NHWC\n", "column '_0.x' row 3 is 'NHWC', not a number"),
        ("graph,runtime,conv9.x\ng,1,0\n", "column 'conv9.x': graph 'g' has no node 'conv9'"),
        ("graph,runtime,_0.x\nmissing,1,0\n", "graph 'missing' has no file"),
        ("graph,runtime,split,_0.x\ng,1,training,0\n", "column 'split' row 2 is 'training'"),
        ("graph,runtime,split,_0.x\ng,1,train,0\ng,2,test,1\n", "graph 'g' has rows in splits"),
        ("graph,runtime,config,_0.x\ng,1,0,0\ng,2,0,1\n", "lists configuration 0 more than once"),
        ("graph,runtime\ng,1\n", "no knob columns"),
        ("graph,runtime,_0.x\n", "no rows"),
        ("graph,runtime," + ",".join(f"k{i}" for i in range(19)) + "\ng,1" + ",0" * 19 + "\n", "at most 18"),
    ],
)
def test_bad_tables_give_one_line_naming_file_column_and_row(tmp_path: Path, csv: str, needle: str) -> None:
    root = _write(tmp_path / "t", csv)
    with pytest.raises(InvalidDataFile, match=needle.replace("(", r"\(").replace(")", r"\)")) as exc:
        load_dataset(root, "train")
    assert "\n" not in str(exc.value)
    ran = run_inprocess("costmodel", "train", "--data", root, "--out", tmp_path / "run")
    assert ran.returncode == 2 and needle.split(" ")[0] in ran.stderr and "Traceback" not in ran.stderr
    assert not (tmp_path / "run").exists()


def test_one_configuration_per_graph_is_said_to_teach_no_ranking(table: Path, tmp_path: Path) -> None:
    """A table with one configuration per graph trains to loss 0 and OPA undefined: one warning says why."""
    import warnings

    from mlsysopt.costmodel.data.record import warn_if_unrankable
    from mlsysopt.errors import MlsysoptWarning

    one = _table_root(tmp_path / "one", graphs=4, configs=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert warn_if_unrankable(load_dataset(one, "train"))
    assert [str(w.message) for w in caught if w.category is MlsysoptWarning] == [
        "every training graph has one configuration: a cost model learns to rank the configurations of a graph, so "
        "it cannot learn a ranking from this data (loss 0, OPA undefined); measure two or more configurations of "
        "each graph"
    ]
    ran = run_inprocess("costmodel", "train", "--data", one, "--out", tmp_path / "run", "--epochs", "1",
                        "--finetune-epochs", "0", "--hidden", "8", "--layers", "1", "--storage", "none")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert [ln for ln in ran.stderr.splitlines() if ln.startswith("warning:")] == ["warning: " + str(caught[0].message)]
    assert not warn_if_unrankable(load_dataset(table, "train"))  # ten configurations per graph: nothing to say


@pytest.fixture(scope="module")
def gst_run(table: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A GNN trained on the table (one epoch: what is checked is the plumbing, not the quality)."""
    out = tmp_path_factory.mktemp("trained") / "gst"
    train(table, out, TrainConfig(epochs=1, finetune_epochs=0, configs_per_graph=4), hidden=8)
    return out


@pytest.fixture(scope="module")
def lightgbm_run(table: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LightGBM ranker trained on the table."""
    out = tmp_path_factory.mktemp("trained") / "lightgbm"
    train(table, out, TrainConfig(mode="lightgbm"))
    return out


@pytest.fixture(params=["gst", "lightgbm"])
def trained(request: pytest.FixtureRequest) -> Path:
    """Each of the two runs above."""
    return request.getfixturevalue(f"{request.param}_run")


def _grid(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_predict_ranks_a_grid_of_settings_for_a_model_nobody_measured(table: Path, trained: Path,
                                                                      tmp_path: Path) -> None:  # fmt: skip
    """`costmodel predict --input MODEL --configs GRID`: the grid's rows ranked, each knob in its training slot (the
    same configurations as the table's rows of that graph score the same, whatever the grid's column order)."""
    import json

    slots = json.loads((trained / "result.json").read_text())["config_slots"]
    assert slots == {"channels_last": 0, "threads": 1}
    lines = (table / "runtimes.csv").read_text().splitlines()
    keys = lines[0].split(",")
    g0 = [dict(zip(keys, ln.split(","), strict=True)) for ln in lines[1:] if ln.startswith("g0,")]
    grid = _grid(tmp_path / "grid.csv", "threads,_2.channels_last,_0.channels_last",
                 [f"{r['threads']},{r['_2.channels_last']},{r['_0.channels_last']}" for r in g0])  # fmt: skip
    model = table / "graphs" / "g0.py"
    r = run_inprocess("costmodel", "predict", "--run", trained, "--input", model, "--configs", grid,
                      "--out", tmp_path / "pred")  # fmt: skip
    assert r.returncode == 0, r.stderr
    row = json.loads((tmp_path / "pred" / "result.json").read_text())["graphs"]["g0"]  # named by the file's stem
    assert r.stdout.startswith("g0: fastest configs")
    assert sorted(row["ranking"]) == list(range(len(g0)))
    from mlsysopt.costmodel.inference import predict

    split = next(s for s in ("train", "valid", "test") if "g0" in load_dataset(table, s).names)
    whole = predict(trained, table, split)["graphs"]["g0"]["scores"]
    np.testing.assert_allclose(row["scores"], whole, rtol=1e-5, atol=1e-6)


def test_predict_configs_bad_inputs_are_one_line_and_write_nothing(table: Path, trained: Path, tmp_path: Path) -> None:
    from cli_helpers import assert_user_error

    model = table / "graphs" / "g0.py"
    ok = _grid(tmp_path / "ok.csv", "threads", ["1", "2"])
    cases = [
        (model, _grid(tmp_path / "a.csv", "threads,batch", ["1,1"]), "knob 'batch' was not a knob"),
        (model, _grid(tmp_path / "b.csv", "threads,runtime", ["1,2.0"]), "column 'runtime'"),
        (model, _grid(tmp_path / "c.csv", "threads", []), "no configuration rows"),
        (model, _grid(tmp_path / "d.csv", "threads", ["fast"]), "d.csv"),
        (table / "runtimes.csv", ok, "one model file"),
    ]
    for inp, grid, needle in cases:
        out = tmp_path / f"out-{grid.stem}-{inp.suffix[1:]}"
        r = run_inprocess("costmodel", "predict", "--run", trained, "--input", inp, "--configs", grid, "--out", out)
        assert_user_error(r, needle)
        assert not out.exists()
    bare = tmp_path / "bare"  # a run whose result.json names no knobs (e.g. trained on TpuGraphs)
    bare.mkdir()
    for f in trained.iterdir():
        if f.is_file():
            (bare / f.name).write_bytes(f.read_bytes())
    import json

    res = json.loads((bare / "result.json").read_text())
    res.pop("config_slots")
    (bare / "result.json").write_text(json.dumps(res))
    assert_user_error(run_inprocess("costmodel", "predict", "--run", bare, "--input", model, "--configs", ok),
                      "not trained on a runtime table")  # fmt: skip


# ---------------------------------------------------------------- the rank ensemble of the two runs above
def test_ensemble_weights_are_chosen_on_validation_and_read_back(table: Path, gst_run: Path, lightgbm_run: Path,
                                                                 tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "ens"
    r = ensemble([gst_run, lightgbm_run], table, out)
    assert r["mode"] == "gst+efd+lightgbm" and r["chosen_on"] == "valid" and len(r["valid_grid"]) == 11
    assert abs(sum(r["weights"]) - 1) < 1e-12
    # the grid holds each member alone, so on validation the ensemble never loses to a member
    assert r["valid"]["opa"] >= max(m["valid"]["opa"] for m in r["members"]) - 1e-6
    assert (out / "weights.png").stat().st_size > 0 and (out / "ensemble.json").is_file()
    model = load_trainer(out)
    assert isinstance(model, RankEnsemble) and model.weights == tuple(r["weights"])
    assert evaluate(out, table)["metrics"] == r["test"]
    # predict: the members' scores, standardised per graph and weighted
    got = predict(out, table, "test")["graphs"]
    parts = [predict(run, table, "test")["graphs"] for run in (gst_run, lightgbm_run)]
    for name, row in got.items():
        want = combine([np.asarray(p[name]["scores"]) for p in parts], r["weights"])
        np.testing.assert_allclose(row["scores"], want, rtol=1e-9, atol=1e-9)
    # a model nobody measured, ranked by the ensemble (the members' knob slots are carried)
    grid = tmp_path / "grid.csv"
    grid.write_text("threads,_0.channels_last,_2.channels_last\n1,0,0\n2,1,1\n")
    ran = run_inprocess("costmodel", "predict", "--run", out, "--input", table / "graphs" / "g0.py", "--configs",
                        grid)  # fmt: skip
    assert ran.returncode == 0, ran.stderr


def test_fixed_weights_from_the_cli(table: Path, gst_run: Path, lightgbm_run: Path, tmp_path: Path) -> None:
    ran = run_inprocess("costmodel", "ensemble", "--member", lightgbm_run, "--member", gst_run, "--data", table,
                        "--weights", "3,1", "--out", tmp_path / "e")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "lightgbm+gst+efd: weights lightgbm 0.75, gst+efd 0.25 (given)" in ran.stdout
    res = json.loads((tmp_path / "e" / "result.json").read_text())
    assert res["valid_grid"] == [] and res["weights"] == [0.75, 0.25]
    assert not (tmp_path / "e" / "weights.png").exists()


def test_bad_ensembles_are_one_line_and_write_nothing(table: Path, gst_run: Path, lightgbm_run: Path,
                                                      tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "never"
    cases = [
        (["--member", gst_run], "2 to 4 members, not 1"),
        (["--member", gst_run, "--member", gst_run], "named twice"),
        (["--member", gst_run, "--member", tmp_path], "--member"),
        (["--member", gst_run, "--member", lightgbm_run, "--weights", "a,b"], "numbers separated by commas"),
        (["--member", gst_run, "--member", lightgbm_run, "--weights", "1"], "1 weight(s) for 2 members"),
        (["--member", gst_run, "--member", lightgbm_run, "--weights", "1,-1"], "non-negative"),
        (["--member", gst_run, "--member", lightgbm_run, "--weights", "0,0"], "not all 0"),
    ]
    for args, needle in cases:
        assert_user_error(run_inprocess("costmodel", "ensemble", *args, "--data", table, "--out", out), needle)
        assert not out.exists()
    broken = tmp_path / "broken"
    broken.mkdir()
    desc = {"kind": "mlsysopt-costmodel-ensemble", "members": [str(tmp_path)], "member_modes": ["x"], "weights": [1]}
    (broken / "ensemble.json").write_text(json.dumps(desc))
    assert_user_error(run_inprocess("costmodel", "evaluate", "--run", broken, "--data", table), "member")


def test_standardising_and_the_grid() -> None:
    assert np.allclose(standardised(np.array([1.0, 1.0, 1.0])), 0)
    z = standardised(np.array([1.0, 2.0, 3.0]))
    assert abs(z.mean()) < 1e-12 and abs(z.std() - 1) < 1e-12
    grid = weight_grid(3)
    assert len(grid) == 15 and all(abs(sum(w) - 1) < 1e-12 for w in grid)
    with pytest.raises(Exception, match="2 to 4"):
        RankEnsemble([], [], [], [])
