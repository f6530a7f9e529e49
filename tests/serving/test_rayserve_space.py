"""Ray Serve's ``max_ongoing_requests`` as a tuned knob (``max_ongoing``), without starting Ray: the space the rayserve
engine tunes, the deployment options and config file that carry it, old files without it, and bad values.
The in-place change on a running Ray Serve is checked in tests/serving/test_rayserve.py (its engine is already up)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import assert_user_error, run_inprocess
from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.inputs import load_config, tuning_space
from mlsysopt.serving.objective import Objective
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.rayserve_config import config_from_options, deployment_options, load_serve_config, serve_config
from mlsysopt.serving.simulator import SimulatedEngine
from mlsysopt.serving.space import Config, Space, Workload
from mlsysopt.serving.tuners import TUNERS, get_tuner
from mlsysopt.serving.tuning import tune

#: a rayserve-shaped space: 4 configurations of the six shared knobs x 3 values of max ongoing requests
SPACE = Space(
    instances=(1, 2), max_batch=(1, 4), batch_timeout_ms=(2.0,), intra_threads=(1,), inter_threads=(1,),
    execution_mode=(0,), max_ongoing=(5, 16, 64),
)  # fmt: skip


def test_only_the_rayserve_engine_tunes_it_and_ray_serves_default_stays_the_default() -> None:
    ray, home, sim = (tuning_space(kind, 2) for kind in ("rayserve", "real", "sim"))
    assert ray.values["max_ongoing"] == (5, 16, 64) and ray.size == 3 * home.size
    assert ray.coords.shape == (ray.size, 7) and home.coords.shape == (home.size, 6)
    # the other engines' spaces are the six knobs as before: nothing they write carries the knob
    assert "max_ongoing" not in home.to_dict() and "max_ongoing" not in sim.to_dict()
    assert all(c.max_ongoing is None for c in home) and "max_ongoing" not in home.default(2).to_dict()
    # Ray Serve's defaults: 1 replica, no batching, ONNX Runtime's threads, max_ongoing_requests 5
    default = ray.default(2)
    assert default == Config(1, 1, 0.0, 2, 1, 0, 5) and deployment_options(default)["max_ongoing_requests"] == 5
    assert Space.from_dict(json.loads(json.dumps(ray.to_dict()))).configs() == ray.configs()
    with pytest.raises(InvalidSpace, match="knob max_ongoing is Ray Serve's.*--engine real"):
        tuning_space("real", 2, {"max_ongoing": [5, 16]})


def test_unset_is_the_derived_value_and_a_space_without_the_knob_ignores_it() -> None:
    assert [Config(max_batch=b).ongoing for b in (1, 2, 4, 16)] == [5, 5, 8, 32]  # max(5, 2 x max batch)
    assert Config(max_batch=16, max_ongoing=3).ongoing == 3
    # unset reads as the derived value where the knob is tuned, and any value as unset where it is not
    assert SPACE.canonical(Config(1, 4, 2.0, 1, 1, 0)) == Config(1, 4, 2.0, 1, 1, 0, 8)
    assert SPACE.index(Config(1, 1, 2.0, 1, 1, 0)) == SPACE.index(Config(1, 1, 2.0, 1, 1, 0, 5))
    home = tuning_space("real", 2)
    assert home.index(Config(1, 4, 2.0, 1, 1, 0, 64)) == home.index(Config(1, 4, 2.0, 1, 1, 0))
    # hill climbing's moves change max_ongoing one grid step at a time, like any knob
    assert Config(1, 4, 2.0, 1, 1, 0, 64) in SPACE.neighbors(Config(1, 4, 2.0, 1, 1, 0, 16))


@pytest.mark.parametrize("bad", [0, -3, 2.5, 4096, True, None, "8"])
def test_a_bad_value_is_one_line_naming_the_knob(bad: object) -> None:
    with pytest.raises(InvalidSpace, match="knob max_ongoing") as err:
        Config.from_dict({"max_batch": 4, "max_ongoing": bad}, where="--config x.json")
    assert "\n" not in str(err.value) and str(err.value).startswith("--config x.json")
    if bad is not None:
        with pytest.raises(InvalidSpace, match="knob max_ongoing"):
            Space(max_ongoing=(5, bad))  # type: ignore[arg-type]


def test_the_config_file_carries_it_and_an_old_result_without_it_still_serves(tmp_path: Path) -> None:
    tuned = Config(2, 4, 5.0, 1, 1, 0, 64)
    spec = serve_config(tuned, "model.onnx", [["x", "<f4", [3]]])
    options = spec["applications"][0]["deployments"][0]
    assert options["max_ongoing_requests"] == 64 and options["user_config"]["max_batch_size"] == 4
    assert config_from_options(options, "f") == tuned
    # the derived value reads back as unset (the same deployment); a file without the field has Ray Serve's 5
    assert config_from_options(deployment_options(Config(2, 4, 5.0, 1, 1, 0)), "f") == Config(2, 4, 5.0, 1, 1, 0)
    del options["max_ongoing_requests"]
    assert config_from_options(options, "f").max_ongoing == 5
    bad = {**deployment_options(tuned), "max_ongoing_requests": 0}
    with pytest.raises(InvalidSpace, match="knob max_ongoing=0"):
        config_from_options(bad, "--config f")
    # a result.json written before the knob existed: served with the derived value, as then
    old = {"recommended": {"instances": 1, "max_batch": 8, "batch_timeout_ms": 2.0, "intra_threads": 1,
                           "inter_threads": 1, "execution_mode": 0}}  # fmt: skip
    (tmp_path / "result.json").write_text(json.dumps(old))
    loaded = load_config(tmp_path / "result.json")
    assert loaded.max_ongoing is None and deployment_options(loaded)["max_ongoing_requests"] == 16
    yaml = tmp_path / "serve_config.yaml"
    yaml.write_text(json.dumps(serve_config(tuned, "model.onnx", [])))  # JSON is YAML
    assert load_serve_config(yaml) == tuned and load_config(yaml) == tuned


@pytest.mark.parametrize("name", TUNERS)
def test_every_tuner_searches_the_enlarged_space_unchanged(name: str) -> None:
    # the simulator has no per-instance admission (it ignores the knob): this checks the tuners' mechanics only
    engine = SimulatedEngine(ServiceProfile.synthetic(cores=2), n_requests=40)
    res = tune(get_tuner(name, SPACE, Objective(), seed=0), engine, [(Workload(300.0), 5)])
    asked = [s.config for s in res.steps]
    assert all(c in SPACE and c.max_ongoing in (5, 16, 64) for c in asked) and res.best in asked
    if name != "default":
        assert len(set(asked)) == len(asked)


@pytest.mark.parametrize(("engine", "value", "needle"), [("sim", "5,16", "knob max_ongoing is Ray Serve's"),
                                                          ("rayserve", "5,x", "--max-ongoing")])  # fmt: skip
def test_the_command_line_option_is_checked_before_a_run_folder(engine: str, value: str, needle: str,
                                                                tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "never"
    ran = run_inprocess("serving", "tune", "--engine", engine, "--model", "zoo:cnn", "--max-ongoing", value,
                        "--out", out)  # fmt: skip
    assert_user_error(ran, needle)
    assert not out.exists()
