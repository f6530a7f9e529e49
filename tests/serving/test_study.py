"""Simulator studies give identical results serially, on the local process pool and on a real Ray cluster."""

from __future__ import annotations

import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.runtime import LocalExecutor, RayExecutor, SerialExecutor
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.space import Space
from mlsysopt.serving.study import run_study

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ARGS = {"rates": (600.0, 900.0), "cap": 6, "pre": 3, "n_requests": 40}


def _study(ex: SerialExecutor | LocalExecutor | RayExecutor) -> dict:
    with ex:
        return run_study(ServiceProfile.synthetic(cores=2), Space.for_machine(2, max_batch=(1, 4)), ["rrl", "random"],
                         [0], ex, **ARGS)  # fmt: skip


def _results(r: dict) -> dict:
    """A study without where it ran and how long the tuner took (not results)."""
    timing = ("executor", "tuner_cpu_s_per_measurement")

    def strip_timing(row: dict) -> dict:
        return {k: v for k, v in row.items() if k not in timing}

    return {**strip_timing(r), "per_seed": [strip_timing(row) for row in r["per_seed"]]}


@pytest.fixture(scope="module")
def serial(one_torch_thread: None) -> dict:
    """The reference study, serially in this process (the local-pool and the Ray test run on different workers)."""
    r = _study(SerialExecutor())
    assert len(r["per_seed"]) == 2 and set(r["evals_to_5pct"]) == {"rrl", "random"}
    assert r["executor"] == "serial"
    return r


def test_serial_and_local_pool_give_identical_studies(serial: dict) -> None:
    assert _results(_study(LocalExecutor(2))) == _results(serial)


@pytest.mark.xdist_group("ray")  # the one test here that uses Ray runs in the Ray group (tests/conftest.py)
def test_serial_and_ray_give_identical_studies(serial: dict, ray_cluster) -> None:
    on_ray = _study(RayExecutor(ray_cluster.address, 2))
    assert _results(on_ray) == _results(serial) and "ray" in on_ray["executor"]


def test_variants_of_one_tuner_run_side_by_side_with_their_own_knobs() -> None:
    profile = ServiceProfile.synthetic(cores=2)
    space = Space.for_machine(2, max_batch=(1, 4))
    args = {"rates": (600.0, 900.0), "cap": 6, "pre": 3, "n_requests": 40}
    tuners = ["rrl", "rrl:greedy", "rrl:again"]
    knobs = {"rrl:greedy": {"tau0": 1e-6, "tau_decay": 1.0, "tau_min": 1e-6}}
    with SerialExecutor() as ex:
        res = run_study(profile, space, tuners, [0, 1], ex, knobs=knobs, **args)
    assert set(res["evals_to_5pct"]) == set(tuners)
    by = {t: [r["evals_to_5pct"] for r in res["per_seed"] if r["tuner"] == t] for t in tuners}
    assert by["rrl"] == by["rrl:again"]  # a tag alone changes nothing
    with SerialExecutor() as ex, pytest.raises(MlsysoptError, match="rrl: invalid knob.*warm_alpha=2"):
        run_study(profile, space, ["rrl:bad"], [0], ex, knobs={"rrl:bad": {"warm_alpha": 2}}, **args)
