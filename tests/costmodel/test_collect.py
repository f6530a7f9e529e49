"""``costmodel collect`` (costmodel/collection/): real runtimes measured here, TpuGraphs layout, resumable, bad inputs.

Tiny budgets (a few configurations, 3 rounds, small graphs): these tests check what is written and how the job
resumes, not the timings themselves.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import run_inprocess
from mlsysopt.costmodel.collection import MANIFEST, collect, make_plan
from mlsysopt.costmodel.collection.engines import TorchEngine
from mlsysopt.costmodel.collection.families import FAMILIES, build
from mlsysopt.costmodel.data import load_dataset
from mlsysopt.errors import InvalidOption, InvalidRunDir, MlsysoptError

TINY = {"configs": 6, "rounds": 3, "families": ["vgg", "nas"]}


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory, one_torch_thread: None) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("collect") / "real"
    return out, collect(out, graphs=3, seed=1, **TINY)


def test_collect_writes_a_loadable_layout_dataset_with_repeats(collected: tuple[Path, dict]) -> None:
    out, manifest = collected
    assert manifest["complete"] and len(manifest["graphs"]) == 3
    assert manifest["data"].startswith("real, measured on ")
    files = sorted(out.glob("*/*.npz"))
    assert len(files) == 3 and {f.parent.name for f in files} <= {"train", "valid", "test"}
    with np.load(files[0], allow_pickle=False) as z:
        rt, ci, rep = z["config_runtime"], z["config_runtime_ci"], z["config_runtime_repeats"]
        assert rt.dtype == np.int64 and rep.shape == (6, 3) and (rt > 0).all()
        assert np.allclose(rt, np.maximum(1, np.rint(ci[:, 0])), atol=1)  # the fastest round
        med = z["config_runtime_median"]
        assert (ci[:, 0] <= med + 1).all() and (med <= ci[:, 1] + 1).all()  # the median lies in [min, max]
        assert str(z["engine"]) == "torch" and json.loads(str(z["graph_spec"]))["family"] in ("vgg", "nas")
        ch = z["config_choices"]
        assert (ch[-1] == ch[0]).all() and (ch[-2] == ch[0]).all()  # repeats of the default: the noise floor
        feat = z["node_config_feat"]
        assert feat.shape[1] == z["node_config_ids"].size and feat.shape[2] == 18
    split = files[0].parent.name
    rec = load_dataset(out, split).record(0)
    assert rec.task == "layout" and rec.x.shape[1] == 140 and rec.num_configs == 6
    saved = json.loads((out / MANIFEST).read_text())
    assert saved["graphs"] == manifest["graphs"] and "noise_floor" in saved


def test_a_timeout_stops_between_graphs_and_resume_finishes_the_same_plan(
    tmp_path: Path, one_torch_thread: None
) -> None:
    out = tmp_path / "real"
    first = collect(out, graphs=2, seed=2, timeout=1e-9, **TINY)  # every start measures one graph, then stops
    assert not first["complete"] and len(first["graphs"]) == 1
    kept = {p.name: p.read_bytes() for p in out.glob("*/*.npz")}
    with pytest.raises(InvalidRunDir, match="--resume"):
        collect(out, graphs=2, seed=2, **TINY)
    with pytest.raises(InvalidRunDir, match="graphs"):
        collect(out, graphs=3, seed=2, resume=True, **TINY)
    done = collect(out, graphs=2, seed=2, resume=True, **TINY)
    assert done["complete"] and len(done["graphs"]) == 2
    assert all((p.read_bytes() == kept[p.name]) for p in out.glob("*/*.npz") if p.name in kept)
    assert [i["name"] for i in make_plan(2, 2, TINY["families"], [])] == [g["name"] for g in done["graphs"]]


def test_the_torch_engine_sets_each_convolution_s_memory_format(one_torch_thread: None) -> None:
    import torch

    module, inputs = build({"family": "vgg", "size": 16, "batch": 1, "stages": 2, "width": 8, "pool": "max",
                            "convs": [1, 1], "kernel": [3, 3]})  # fmt: skip
    engine = TorchEngine(module, inputs, "vgg")
    assert len(engine.wrappers) == 2 and len(engine.config_nodes) == 3  # the graph input + 2 convolutions
    configs = engine.draw(6, np.random.default_rng(0))
    assert (configs[0, :-1] == 0).all() and (configs[1, :-1] == 1).all() and configs[0, -1] == 1
    engine.apply(np.array([1, 0, 1]))
    assert engine.wrappers[0].conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert engine.wrappers[1].conv.weight.is_contiguous()
    with torch.inference_mode():
        want = module(*inputs)
        engine.apply(np.array([1, 1, 1]))
        assert torch.allclose(engine.gm(*inputs), want, atol=1e-5)  # formats change the speed, not the result
    feat = engine.features(configs)
    assert feat.shape == (6, 3, 18) and (feat[:, 0, 2] == 1).all() and (feat[1, 1:, 0] == 1).all()
    one = TorchEngine(module, inputs, "vgg", threads=(1,)).draw(8, np.random.default_rng(0))
    assert (one[:, -1] == 1).all()  # only the thread counts asked for


def test_every_family_builds_distinct_graphs() -> None:
    specs = make_plan(len(FAMILIES) * 2, 0, FAMILIES, [])
    assert len({s["name"] for s in specs}) == len(specs)
    assert {s["spec"]["family"] for s in specs} == set(FAMILIES)


def test_a_user_onnx_model_is_measured_under_onnxruntime_settings(tmp_path: Path, one_torch_thread: None) -> None:
    import torch
    from torch import nn

    from mlsysopt.graph.importers.onnx import export_onnx

    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 1)).eval()
    path = export_onnx(model, (torch.randn(1, 3, 8, 8),), tmp_path / "net.onnx")
    manifest = collect(tmp_path / "ort", graphs=0, sources=[str(path)], configs=4, rounds=3)
    (row,) = manifest["graphs"]
    assert row["engine"] == "onnxruntime" and row["name"] == "real_source_net"
    with np.load(next((tmp_path / "ort").glob("*/*.npz")), allow_pickle=False) as z:
        assert (z["node_config_feat"][:, :, 4] == 1).all()  # every configurable node carries the session settings


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"families": ["vgg", "alexnet"]}, "unknown family 'alexnet'"),
        ({"configs": 2}, "--configs must be an integer in 4"),
        ({"rounds": 1}, "--rounds must be an integer in 3"),
        ({"graphs": 0}, "nothing to collect"),
        ({"timeout": -1.0}, "--timeout must be a positive"),
        ({"threads": [0]}, "thread counts must be integers"),
        ({"graphs": 0, "sources": ["missing.py:model"]}, "missing.py"),
    ],
)
def test_bad_options_are_refused_before_anything_is_written(tmp_path: Path, kwargs: dict, needle: str) -> None:
    opts = {"graphs": 1, "configs": 4, "rounds": 3} | kwargs
    with pytest.raises(MlsysoptError, match=needle):
        collect(tmp_path / "out", **opts)
    assert not (tmp_path / "out").exists()


def test_a_model_without_convolutions_is_refused_with_the_way_out(tmp_path: Path) -> None:
    (tmp_path / "mlp.py").write_text(
        "import torch\nfrom torch import nn\n\ndef model():\n    return nn.Linear(4, 2), (torch.randn(1, 4),)\n"
    )
    with pytest.raises(InvalidOption, match="no 2-D convolution.*ONNX"):
        collect(tmp_path / "out", graphs=0, sources=[f"{tmp_path / 'mlp.py'}:model"], configs=4, rounds=3)
    assert not (tmp_path / "out").exists()


def test_the_cli_collects_and_says_the_data_is_real(tmp_path: Path) -> None:
    ran = run_inprocess("costmodel", "collect", "--out", tmp_path / "d", "--graphs", "1", "--configs", "4",
                        "--rounds", "3", "--families", "nas")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "real, measured on" in ran.stdout and "complete" in ran.stdout
    bad = run_inprocess("costmodel", "collect", "--out", tmp_path / "e", "--families", "nope")
    assert bad.returncode == 2 and "unknown family 'nope'" in bad.stderr and "Traceback" not in bad.stderr


def test_ship_copies_the_data_not_the_bookkeeping_and_bounds_its_size(collected: tuple[Path, dict],
                                                                       tmp_path: Path) -> None:  # fmt: skip
    from mlsysopt.costmodel.collection import ship

    out, manifest = collected
    done = ship(out, tmp_path / "shipped", max_mb=5)
    assert done["graphs"] == 3 and (tmp_path / "shipped" / MANIFEST).is_file()
    assert not any((tmp_path / "shipped" / name).exists() for name in ("checkpoint.json", "settings.json", "log.txt"))
    assert load_dataset(tmp_path / "shipped", next(iter(s for s, n in manifest["splits"].items() if n))).names
    with pytest.raises(InvalidOption, match="above the 1e-06 MB"):
        ship(out, tmp_path / "x", max_mb=1e-6)
