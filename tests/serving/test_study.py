"""Simulator studies give identical results serially, on the local process pool and on a real Ray cluster."""

from __future__ import annotations

import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.runtime import LocalExecutor, RayExecutor, SerialExecutor
from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.space import Space
from mlsysopt.serving.study import run_study

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.usefixtures("one_torch_thread")]


def test_serial_local_pool_and_ray_give_identical_studies(ray_cluster) -> None:
    profile = ServiceProfile.synthetic(cores=2)
    space = Space.for_machine(2, max_batch=(1, 4))
    args = {"rates": (600.0, 900.0), "cap": 6, "pre": 3, "n_requests": 40}
    results = []
    for ex in (SerialExecutor(), LocalExecutor(2), RayExecutor(ray_cluster.address, 2)):
        with ex:
            results.append(run_study(profile, space, ["rrl", "random"], [0], ex, **args))
    timing = ("executor", "tuner_cpu_s_per_measurement")  # where it ran and how long the tuner took: not results

    def strip_timing(r: dict) -> dict:
        return {k: v for k, v in r.items() if k not in timing}

    strip = [{**strip_timing(r), "per_seed": [strip_timing(row) for row in r["per_seed"]]} for r in results]
    assert strip[0] == strip[1] == strip[2]
    assert len(strip[0]["per_seed"]) == 2 and set(strip[0]["evals_to_5pct"]) == {"rrl", "random"}
    assert results[0]["executor"] == "serial" and "ray" in results[2]["executor"]


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
