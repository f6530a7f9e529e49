"""A trained cost model as a latency oracle: predicted milliseconds of a PyTorch model or an ONNX session setting.

:class:`LatencyModel` loads a GNN run trained with an absolute target (``--loss logmse``) on runtimes with a known
unit (a ``costmodel collect`` dataset records nanoseconds), builds the TpuGraphs layout record of a model the way
``collect`` does (:mod:`mlsysopt.costmodel.collection.engines`) and reads its score back as a runtime:

* :meth:`LatencyModel.torch_ms` -- a PyTorch module at PyTorch's default (every convolution contiguous, one
  thread), which is what NAS measures as ``latency_ms`` (``nas search --latency-model RUN``);
* :meth:`LatencyModel.session_ms` -- an ONNX model under ONNX Runtime settings (intra-op threads, sequential or
  parallel), what serving tunes at the op level (:func:`mlsysopt.serving.cost_model.serving_prior`).

A model trained with a ranking loss orders the configurations of one graph; its scores are not times, and it is
refused with the way out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.errors import InvalidCheckpoint
from mlsysopt.io import read_json
from mlsysopt.runtime.threads import torch_threads

#: Nanoseconds per unit of a run's runtimes.
UNITS_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def run_unit(run: str | Path) -> str:
    """The runtime unit of the data a run trained on (``result.json``'s ``runtime_unit``)."""

    result = read_json(Path(run) / "result.json", InvalidCheckpoint)
    unit = result.get("runtime_unit") if isinstance(result, dict) else None
    if unit not in UNITS_NS:
        raise InvalidCheckpoint(f"{run}: its training data declares no runtime unit (a 'costmodel collect' dataset "
                                "records ns): a latency oracle needs one")  # fmt: skip
    return str(unit)


class LatencyModel:
    """Predicted latencies (ms) from a cost-model run trained with ``--loss logmse`` on timed runtimes."""

    def __init__(self, run: str | Path) -> None:
        # deferred: imports numba, scipy, torch, yaml
        from mlsysopt.costmodel.inference import load_trainer

        # deferred: imports numba, pandas, psutil, pyarrow, scipy, torch, torch_geometric, yaml
        from mlsysopt.costmodel.trainer import Trainer

        self.run = Path(run)
        trainer = load_trainer(self.run)
        if not isinstance(trainer, Trainer):
            raise InvalidCheckpoint(f"--latency-model {run}: a tree baseline ranks configurations; a latency oracle "
                                    "needs a GNN trained with --loss logmse")  # fmt: skip
        if not trainer.absolute or trainer.task != "layout":
            raise InvalidCheckpoint(f"--latency-model {run}: trained with loss '{trainer.tc.loss}' on {trainer.task} "
                                    "graphs; its scores order configurations of one graph and are not times: train "
                                    "one with --loss logmse on a 'costmodel collect' dataset")  # fmt: skip
        self.trainer = trainer
        self.scale_ms = UNITS_NS[run_unit(self.run)] / 1e6

    def _ms(self, arrays: dict[str, np.ndarray], name: str) -> np.ndarray:
        # deferred: imports numba, scipy, yaml
        from mlsysopt.costmodel.data.record import InMemoryDataset

        # deferred: imports numba, scipy, yaml
        from mlsysopt.costmodel.data.tpugraphs import layout_record

        c = arrays["node_config_feat"].shape[0]
        rec = layout_record(arrays | {"config_runtime": np.ones(c)}, name)
        with torch_threads(1):
            scores = self.trainer.predict(InMemoryDataset([rec]))[name]
        return np.exp(self.trainer.model.log_runtime(scores)) * self.scale_ms

    def torch_ms(self, module: Any, inputs: tuple[Any, ...], name: str = "model") -> float:
        """Predicted ms of one forward pass of ``module`` on ``inputs`` at PyTorch's defaults (contiguous, 1 thread)."""
        # deferred: imports numba, scipy, torch, yaml
        from mlsysopt.costmodel.collection.engines import TorchEngine

        engine = TorchEngine(module, tuple(inputs), name)
        arrays = engine.arrays()
        default = np.zeros((1, engine.choices), np.int64)
        default[0, -1] = 1
        return float(self._ms(arrays | {"node_config_feat": engine.features(default)}, name)[0])

    def session_ms(self, onnx_path: str | Path, settings: list[tuple[int, int]]) -> np.ndarray:
        """Predicted ms of one inference of an ONNX model for each ``(intra_threads, parallel)`` setting, with every
        graph optimisation (ONNX Runtime's default level)."""
        # deferred: imports numba, scipy, torch, yaml
        from mlsysopt.costmodel.collection.engines import OrtEngine

        engine = OrtEngine(onnx_path, Path(onnx_path).stem)
        configs = np.array([(3, int(t), int(p)) for t, p in settings], np.int64)
        feat = engine.features(configs)
        feat[:, :, 3] = np.log2(np.maximum(1, configs[:, 1:2]))  # intra-op threads beyond the collected 1-2
        return self._ms(engine.arrays() | {"node_config_feat": feat}, Path(onnx_path).stem)
