"""Ray Serve on a Ray cluster someone else runs (``--address``): the shared 2-node test cluster of the Ray group.

A Serve instance that serves another application is refused (a declarative deployment would delete it); one that
already runs on its own HTTP port is joined on that port; leaving removes mlsysopt's application only.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.ports import free_port
from mlsysopt.serving.model import ServedModel
from mlsysopt.serving.rayserve import RayServeEngine
from mlsysopt.serving.space import Config, Workload

pytestmark = pytest.mark.xdist_group("ray")

_OWNER = """
import sys
import ray
from ray import serve
from mlsysopt.runtime.ray_driver import connect

assert connect(ray, sys.argv[1], None) is None


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Other:
    def __call__(self, request):
        return "other"


for line in sys.stdin:
    action, *args = line.split()
    if action == "other":
        serve.start(http_options={"host": "127.0.0.1", "port": int(args[0])}, proxy_location="HeadOnly")
        serve.run(Other.bind(), name="other", route_prefix="/other")
    elif action == "delete":
        serve.delete("other")
    else:
        print("left", sorted(serve.status().applications), flush=True)
        serve.shutdown()
    print("done", flush=True)
"""


class _Owner:
    """Another user of the cluster: a Ray driver that starts Serve with its own application, deletes it, stops."""

    def __init__(self, address: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _OWNER, address], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def __call__(self, *args: object) -> list[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(" ".join(map(str, args)) + "\n")
        self.proc.stdin.flush()
        lines = []
        while not lines or lines[-1] != "done":
            line = self.proc.stdout.readline()
            assert line, f"the owner's driver ended (exit {self.proc.wait()})"
            lines.append(line.strip())
        return lines[:-1]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_a_serve_instance_of_someone_else_is_refused_or_joined_on_its_own_port(ray_cluster, cnn_path: Path) -> None:
    model = ServedModel(cnn_path)
    theirs, owner = free_port(), _Owner(ray_cluster.address)
    owner("other", theirs)
    try:
        with pytest.raises(MlsysoptError, match=r"already runs 1 application\(s\) \(other\).*would delete them"):
            RayServeEngine(model, address=ray_cluster.address)
        owner("delete")  # Serve keeps running on its port, with no application
        with RayServeEngine(model, n_requests=10, warmup=1, address=ray_cluster.address) as engine:
            assert engine.port == theirs and engine.host == "127.0.0.1"
            m = engine.measure(Config(1, 1, 0.0, 1, 1, 0), Workload(rate=20.0))
            assert m.completed == 10 and m.extra["failed"] == 0
        assert "left []" in owner("shutdown")  # mlsysopt's application went with the engine
    finally:
        owner.close()
