"""Resolving what a serving job is built from: profiles, config files, knob lists, backends, staged models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlsysopt.errors import InvalidSpace, MlsysoptError
from mlsysopt.serving.inputs import (
    ModelStage,
    build_space,
    load_config,
    make_backend,
    resolve_profile,
    tuning_space,
)
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.simulator import SimulatedEngine
from mlsysopt.serving.space import Config, Space


def test_resolve_profile_specs(tmp_path: Path) -> None:
    assert resolve_profile("synthetic").cores == 32
    assert resolve_profile("synthetic:8").cores == 8
    path = ServiceProfile.synthetic(4).save(tmp_path / "p.json")
    assert resolve_profile(str(path)).cores == 4
    with pytest.raises(InvalidSpace, match="core count"):
        resolve_profile("synthetic:many")
    with pytest.raises(InvalidSpace, match="must be 1 to 4096"):
        resolve_profile("synthetic:0")
    with pytest.raises(InvalidSpace, match="missing.json: no such file"):
        resolve_profile(str(tmp_path / "missing.json"))


def test_load_config_from_a_result_or_a_plain_object(tmp_path: Path) -> None:
    want = Config(2, 4, 2.0, 1, 1)
    (tmp_path / "result.json").write_text(json.dumps({"best": want.to_dict(), "measurements": []}))
    assert load_config(tmp_path / "result.json") == want
    (tmp_path / "plain.json").write_text(json.dumps({"instances": 2, "max_batch": 4}))
    assert load_config(tmp_path / "plain.json") == Config(instances=2, max_batch=4)
    (tmp_path / "bad.json").write_text(json.dumps({"instances": 2, "threads": 4}))
    with pytest.raises(InvalidSpace, match="--config .*bad.json: unknown knob.*threads"):
        load_config(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(InvalidSpace, match="list.json: expected an object"):
        load_config(tmp_path / "list.json")


def test_build_space_replaces_the_given_knobs_only() -> None:
    base = Space.for_machine(4)
    space = build_space(base, {"instances": [1, 2], "batch_timeout_ms": [0.0], "intra_threads": None})
    assert space.values["instances"] == (1, 2) and space.values["batch_timeout_ms"] == (0.0,)
    assert space.values["intra_threads"] == base.values["intra_threads"]
    assert space.max_threads == base.max_threads and space.max_total_threads == base.max_total_threads
    with pytest.raises(InvalidSpace, match="--max-batch lists no values"):
        build_space(base, {"max_batch": []})
    with pytest.raises(InvalidSpace, match="unknown knob.*threads"):
        build_space(base, {"threads": [1]})
    with pytest.raises(InvalidSpace, match="intra_threads=64 exceeds"):
        build_space(base, {"intra_threads": [1, 64]})
    assert tuning_space("sim", 8).values["max_batch"][-1] == 64
    assert tuning_space("real", 8).values["max_batch"][-1] == 16


def test_make_backend_kinds() -> None:
    sim = make_backend("sim", profile=ServiceProfile.synthetic(4), requests=50, slo_ms=10.0, seed=2)
    assert isinstance(sim, SimulatedEngine) and sim.cores == 4 and sim.n_requests == 50 and sim.slo_ms == 10.0
    assert "synthetic 4-core profile" in sim.describe()
    assert make_backend("sim").cores == 32  # the default synthetic profile
    with pytest.raises(MlsysoptError, match="unknown --engine 'gpu'"):
        make_backend("gpu")
    with pytest.raises(MlsysoptError, match="needs --model"):
        make_backend("real")


def test_model_stage_exports_a_zoo_model_to_a_temporary_folder_until_kept(tmp_path: Path) -> None:
    stage = ModelStage("zoo:cnn")
    staged = stage.model.path
    assert staged.is_file() and not staged.is_relative_to(tmp_path)
    kept = stage.keep(tmp_path)
    assert kept == tmp_path / "cnn.onnx" and kept.read_bytes() == staged.read_bytes()
    stage.close()
    assert not staged.exists() and kept.is_file()
    given = ModelStage(str(kept))
    assert given.keep(tmp_path / "elsewhere") == kept  # a file the user gave stays where it is
    with pytest.raises(MlsysoptError, match="unknown zoo model 'nope'"):
        ModelStage("zoo:nope")
    with pytest.raises(MlsysoptError, match="missing.onnx: no such file"):
        ModelStage(str(tmp_path / "missing.onnx"))
