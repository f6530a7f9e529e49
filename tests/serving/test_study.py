"""Simulator studies give identical results serially, on the local process pool and on a real Ray cluster."""

from __future__ import annotations

import pytest

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
