"""A Ray Serve application that serves one ONNX model over HTTP: the deployment ``mlsysopt serving`` tunes.

This module is self-contained (numpy, onnxruntime and Ray Serve only, no mlsysopt import): ``serving tune
--engine rayserve`` copies it next to the ``serve_config.yaml`` it writes, so that Ray Serve's own entry points
(``serve run serve_config.yaml``, ``serve deploy``) deploy the tuned configuration without mlsysopt installed.

The two levels RRL tunes map onto Ray Serve's own knobs:

* request level: ``num_replicas`` (instances), dynamic batching with ``@serve.batch`` (``max_batch_size`` counted
  in rows, ``batch_wait_timeout_s``) and ``max_ongoing_requests`` per replica;
* op level: the ONNX Runtime session of each replica (``intra_op_num_threads``, ``inter_op_num_threads``,
  ``execution_mode``) and ``ray_actor_options.num_cpus``.

Batching and the session options travel in ``user_config``, so Ray Serve changes them in place (``reconfigure``)
without restarting a replica, as it does ``max_ongoing_requests``; a change of ``num_replicas`` adds or removes
replicas; only ``num_cpus`` restarts them.

Protocol: ``POST /`` with the raw bytes of one request's rows, the inputs one after the other in the model's
input order (C order, the model's dtypes); the reply is the first output's rows as raw bytes. ``GET /-/info``
reports the session options, batching and ``max_ongoing_requests`` in force (what a test reads to check a deployment
is the one configured).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import math
import os
from typing import Any

import numpy as np
import onnxruntime as ort
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

#: what ``reconfigure`` accepts, with Ray Serve's and ONNX Runtime's defaults (one row per batch: no batching)
DEFAULT_USER_CONFIG = {
    "max_batch_size": 1,
    "batch_wait_timeout_s": 0.0,
    "intra_op_num_threads": 0,  # 0: ONNX Runtime picks (all cores)
    "inter_op_num_threads": 0,
    "execution_mode": "ORT_SEQUENTIAL",
}
_MODES = {"ORT_SEQUENTIAL": ort.ExecutionMode.ORT_SEQUENTIAL, "ORT_PARALLEL": ort.ExecutionMode.ORT_PARALLEL}


def _rows(batch: list[np.ndarray]) -> int:
    return sum(len(x[0]) for x in batch)


def _ongoing() -> int | None:
    """The replica's ``max_ongoing_requests`` in force (Ray Serve updates its context on an in-place change); None
    where this Ray Serve keeps it elsewhere."""
    try:
        return int(serve.get_replica_context()._deployment_config.max_ongoing_requests)
    except Exception:  # a private field of Ray Serve's: any failure reads as "unknown"
        return None


@serve.deployment(name="OnnxModel")
class OnnxModel:
    """One replica: an ONNX Runtime session behind Ray Serve's dynamic batcher.

    Args:
        model: Path of the ``.onnx`` file (relative paths are read from the working directory).
        inputs: ``[[name, dtype, per-row shape], ...]`` in the model's input order.
    """

    def __init__(self, model: str, inputs: list[list[Any]]) -> None:
        if not os.path.isfile(model):
            raise FileNotFoundError(f"{model}: no such model file on this node")
        self.model = model
        self.inputs = [(str(n), np.dtype(d), tuple(int(s) for s in shape)) for n, d, shape in inputs]
        self.row_bytes = [d.itemsize * math.prod(shape) for _, d, shape in self.inputs]
        self.options: dict[str, Any] = {}
        self.session: ort.InferenceSession | None = None
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)  # one batch in ONNX Runtime at a time
        self.reconfigure(dict(DEFAULT_USER_CONFIG))

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Apply batching and session options (Ray Serve calls this on start and on a ``user_config`` change)."""
        cfg = {**DEFAULT_USER_CONFIG, **(user_config or {})}
        session_keys = ("intra_op_num_threads", "inter_op_num_threads", "execution_mode")
        options = {k: cfg[k] for k in session_keys}
        if options != self.options or self.session is None:
            so = ort.SessionOptions()
            so.intra_op_num_threads = int(options["intra_op_num_threads"])
            so.inter_op_num_threads = int(options["inter_op_num_threads"])
            so.execution_mode = _MODES[str(options["execution_mode"])]
            so.log_severity_level = 3
            # several replicas share the cores: idle pool threads must not spin on them
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            so.add_session_config_entry("session.inter_op.allow_spinning", "0")
            self.session = ort.InferenceSession(self.model, sess_options=so, providers=["CPUExecutionProvider"])
            self.options = options
        self.infer.set_max_batch_size(int(cfg["max_batch_size"]))
        self.infer.set_batch_wait_timeout_s(float(cfg["batch_wait_timeout_s"]))
        self.batching = {k: cfg[k] for k in ("max_batch_size", "batch_wait_timeout_s")}

    def _run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(None, feeds)[0]  # type: ignore[union-attr]

    @serve.batch(max_batch_size=1, batch_wait_timeout_s=0.0, batch_size_fn=_rows)
    async def infer(self, batch: list[list[np.ndarray]]) -> list[bytes]:
        """Run the batched rows through the session once; each request gets its own rows of the first output."""
        counts = [len(parts[0]) for parts in batch]
        feeds = {name: np.concatenate([parts[i] for parts in batch]) for i, (name, _, _) in enumerate(self.inputs)}
        out = await asyncio.get_running_loop().run_in_executor(self.pool, self._run, feeds)
        bounds = np.cumsum([0, *counts])
        return [np.ascontiguousarray(out[a:b]).tobytes() for a, b in itertools.pairwise(bounds)]

    def _parse(self, body: bytes) -> list[np.ndarray]:
        per_row = sum(self.row_bytes)
        if not body or len(body) % per_row:
            raise ValueError(f"a request holds whole rows of {per_row} bytes, got {len(body)} bytes")
        rows, parts, at = len(body) // per_row, [], 0
        for (_, dtype, shape), size in zip(self.inputs, self.row_bytes, strict=True):
            parts.append(
                np.frombuffer(body, dtype=dtype, count=rows * size // dtype.itemsize, offset=at).reshape(rows, *shape)
            )
            at += rows * size
        return parts

    async def __call__(self, request: Request) -> Response:
        if request.method == "GET":
            info = {"session": self.options, "batching": self.batching, "pid": os.getpid(), "ongoing": _ongoing()}
            return Response(json.dumps(info), media_type="application/json")
        try:
            parts = self._parse(await request.body())
        except ValueError as exc:
            return Response(str(exc), status_code=400)
        return Response(await self.infer(parts), media_type="application/octet-stream")


def app_builder(args: dict[str, Any]) -> Any:
    """The application ``serve run``/``serve deploy`` build from a config file (``import_path: ...:app_builder``).

    Args:
        args: ``{"model": path, "inputs": [[name, dtype, per-row shape], ...]}``.

    Returns:
        The bound application; the config file's ``deployments`` section sets its options.
    """
    return OnnxModel.bind(str(args["model"]), list(args["inputs"]))
