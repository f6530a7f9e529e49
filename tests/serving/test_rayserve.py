"""Ray Serve as a serving engine: a real local Ray Serve, real HTTP, real replicas (a small CNN; short windows).

One engine is started for the module (Ray and Ray Serve take ~10 s to start on 2 cores); the tests that break it
(a corrupt model) run last, and those on one thread per replica before the one that asks for two (their
configuration is then applied in place, not by restarting the replica: ~2 s each time). A tune's deployment
checked with `serve run`: tests/serving/test_rayserve_tune.py (its own module, so this engine is stopped while it
starts two Ray instances of its own).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlsysopt.errors import InvalidModel, MlsysoptError
from mlsysopt.serving.inputs import load_config
from mlsysopt.serving.model import ServedModel
from mlsysopt.serving.rayserve import RayServeEngine
from mlsysopt.serving.rayserve_config import deployment_options
from mlsysopt.serving.rayserve_deploy import replica_info
from mlsysopt.serving.space import Config, Workload

#: every test that starts Ray runs on one xdist worker: two Ray instances at once on 2 cores slow both ~2x (the two
#: that start none, a refused engine and the config file, run beside that group)
RAY = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def model(cnn_path: Path) -> ServedModel:
    return ServedModel(cnn_path)


@pytest.fixture(scope="module")
def engine(model: ServedModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayServeEngine]:
    log = str(tmp_path_factory.mktemp("raylog") / "ray.log")
    # one constructor try per replica in this private Ray (Ray Serve's default: 3, each a replica start, ~5 s on the
    # suite's loaded cores) for the model that fails to load; the config-file deployment has no such option
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_SERVE_MAX_PER_REPLICA_RETRY_COUNT", "1")
        with RayServeEngine(model, n_requests=60, window_s=0.5, warmup=2, slo_ms=1000.0, log=log) as eng:
            yield eng


@RAY
def test_a_window_is_measured_over_http_and_the_deployment_is_the_configuration(engine: RayServeEngine) -> None:
    cfg = Config(instances=1, max_batch=4, batch_timeout_ms=2.0, intra_threads=1, inter_threads=1)
    m = engine.measure(cfg, Workload(rate=40.0))
    assert m.n_requests == 20 == m.completed  # 0.5 s of arrivals at 40 req/s, fewer than --requests 60
    assert 0 < m.p50_ms <= m.p99_ms < 1000.0 and m.extra["failed"] == 0
    info = replica_info(engine.port)  # what the replica itself runs with
    assert info["session"] == {"intra_op_num_threads": 1, "inter_op_num_threads": 1, "execution_mode": "ORT_SEQUENTIAL"}
    assert info["batching"] == {"max_batch_size": 4, "batch_wait_timeout_s": 0.002}


@RAY
def test_a_replica_killed_mid_window_is_measured_again(engine: RayServeEngine) -> None:
    cfg = Config(instances=1, max_batch=1, batch_timeout_ms=0.0, intra_threads=1, inter_threads=1)
    engine.configure(cfg)
    pid = replica_info(engine.port)["pid"]
    killer = threading.Timer(0.4, os.kill, (pid, signal.SIGKILL))  # the warm-up is 2 requests, then the window
    killer.start()
    m = engine.measure(cfg, Workload(rate=40.0))
    killer.join()
    assert m.extra["retried_windows"] == 1 and m.extra["failed"] == 0 and m.completed == m.n_requests
    assert replica_info(engine.port)["pid"] != pid  # Ray Serve started a new replica


@RAY
def test_a_profile_calibrated_on_ray_serve_puts_its_overhead_in_the_hand_off(engine: RayServeEngine) -> None:
    from mlsysopt.serving.profile import ServiceProfile
    from mlsysopt.serving.profiling import calibrate_outside
    from mlsysopt.serving.simulator import SimulatedEngine

    timed = ServiceProfile(0.05, 0.2, 0.5, 0.0, 0.0, 0.0, cores=2, source="measured", model="cnn")
    prof, figures = calibrate_outside(timed, engine, rate=10.0)
    assert figures["engine"] == "rayserve" and figures["requests"] == 5  # 0.5 s windows at 10 req/s
    assert prof.dispatch_ms == prof.wake_ms == 0.0
    assert prof.handoff_ms == pytest.approx(figures["p50_ms"] - timed.service_ms(1, 1, 1)) and prof.handoff_ms > 0
    # the simulator charges the hand-off to every request: at a low rate it predicts the measured median
    sim = SimulatedEngine(prof, n_requests=200, seed=0).measure(Config(1, 1, 0.0, 1, 1, 0), Workload(rate=10.0))
    assert sim.p50_ms == pytest.approx(figures["p50_ms"], rel=0.05)


@RAY
def test_a_new_batch_size_or_replica_count_is_applied_in_place_and_num_cpus_restarts(engine: RayServeEngine) -> None:
    base = Config(instances=1, max_batch=4, batch_timeout_ms=2.0, intra_threads=1, inter_threads=1)
    engine.configure(base)
    pid = replica_info(engine.port)["pid"]
    assert replica_info(engine.port)["ongoing"] == 8  # max_ongoing not set: max(5, 2 x max batch)
    before = dict(engine.redeploys)
    engine.configure(Config(instances=1, max_batch=8, batch_timeout_ms=1.0, intra_threads=1, inter_threads=1))
    assert replica_info(engine.port)["pid"] == pid  # the same replica process, reconfigured
    assert replica_info(engine.port)["batching"]["max_batch_size"] == 8
    # max_ongoing_requests as tuned, in place too (Ray Serve reconfigures the replica, no restart)
    engine.configure(Config(1, 8, 1.0, 1, 1, 0, max_ongoing=3))
    info = replica_info(engine.port)
    assert info["pid"] == pid and info["ongoing"] == 3
    engine.configure(Config(instances=1, max_batch=8, batch_timeout_ms=1.0, intra_threads=2, inter_threads=1))
    assert engine.redeploys["in_place"] == before["in_place"] + 2
    assert engine.redeploys["restarted"] == before["restarted"] + 1  # 2 threads -> num_cpus 2: new replicas
    assert replica_info(engine.port)["session"]["intra_op_num_threads"] == 2


@RAY
def test_a_model_that_fails_to_load_in_a_replica_is_one_clear_error(engine: RayServeEngine, tmp_path: Path) -> None:
    broken = tmp_path / "cnn.onnx"
    broken.write_bytes(engine.model.path.read_bytes())
    model = ServedModel(broken)  # loads here...
    broken.write_bytes(b"not an onnx model")  # ...and no longer in the replica
    engine.model = model
    with pytest.raises(InvalidModel, match="failed to load in a Ray Serve replica"):
        engine.configure(Config(instances=1, max_batch=2, batch_timeout_ms=0.0, intra_threads=1, inter_threads=1))


def test_a_taken_port_and_an_unreachable_ray_are_refused_before_anything_starts(model: ServedModel) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(MlsysoptError, match=f"--port {port}: the HTTP port is taken"):
            RayServeEngine(model, port=port)
    with pytest.raises(MlsysoptError, match="--address 127.0.0.1:1: no Ray head answers"):
        RayServeEngine(model, address="127.0.0.1:1")


def test_the_config_file_maps_every_knob_and_reads_back(tmp_path: Path, model: ServedModel) -> None:
    from mlsysopt.serving.rayserve_config import model_inputs, write_deployment

    cfg = Config(instances=2, max_batch=8, batch_timeout_ms=5.0, intra_threads=1, inter_threads=2, execution_mode=1)
    opts = deployment_options(cfg)
    assert opts["num_replicas"] == 2 and opts["max_ongoing_requests"] == 16
    assert opts["ray_actor_options"] == {"num_cpus": 2.0}  # 1 intra + 1 extra inter-op thread
    files = write_deployment(cfg, model.path, model_inputs(model), tmp_path / "rayserve")
    assert files == ["rayserve/serve_config.yaml", "rayserve/mlsysopt_serve_app.py", "rayserve/model.onnx"]
    assert load_config(tmp_path / "rayserve" / "serve_config.yaml") == cfg
    tuned = Config(2, 8, 5.0, 1, 2, 1, max_ongoing=64)  # the knob as tuned on Ray Serve, in the file and read back
    write_deployment(tuned, model.path, model_inputs(model), tmp_path / "tuned")
    assert "max_ongoing_requests: 64" in (tmp_path / "tuned" / "serve_config.yaml").read_text()
    assert load_config(tmp_path / "tuned" / "serve_config.yaml") == tuned
    # the copied application module imports nothing of mlsysopt: it deploys where mlsysopt is not installed
    assert "mlsysopt" not in "".join(
        line for line in (tmp_path / "rayserve" / "mlsysopt_serve_app.py").read_text().splitlines()
        if line.startswith(("import", "from"))
    )  # fmt: skip
