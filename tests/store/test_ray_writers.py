"""Eight Ray tasks on the local 2-node test cluster write one study on a real PostgreSQL server: no trial lost."""

from __future__ import annotations

import optuna
import pytest

from mlsysopt.runtime import RayExecutor
from mlsysopt.store import Store, StudyHandle, TrialRecord, parse_storage
from mlsysopt.store.writer import machine_id, write_task

pytestmark = pytest.mark.xdist_group("ray")


def test_eight_ray_writers_lose_no_trial(ray_cluster, postgres) -> None:
    spec = parse_storage(postgres.url)
    sid, name = Store.open(spec).create_study("ray-writers", "minimize", {"mlsysopt.command": "test"})
    handle = StudyHandle(spec, sid, name, machine_id())
    items = [(handle, [TrialRecord({"w": w, "i": i}, [float(i)], key=f"{w}:{i}") for i in range(10)], 2)
             for w in range(8)]  # fmt: skip
    # 8 tasks in flight at once: a quarter of a CPU each on the two 1-CPU nodes
    with RayExecutor(ray_cluster.address, 8, num_cpus=0.25) as ex:
        out = ex.map(write_task, items)
    assert len({pid for _, pid in out}) >= 2
    assert sorted(n for numbers, _ in out for n in numbers) == list(range(80))
    study = optuna.load_study(study_name=name, storage=spec.url)
    assert sorted(t.number for t in study.trials) == list(range(80))
    assert sorted(t.user_attrs["key"] for t in study.trials) == sorted(f"{w}:{i}" for w in range(8) for i in range(10))
