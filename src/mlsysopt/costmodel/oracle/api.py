"""What the commands and the other systems call: load an oracle, predict or time a source, train an oracle.

:func:`load_oracle` accepts ``None``/``builtin`` (the shipped oracle), a folder an oracle was saved into, or -- for
runs made before the oracle existed -- a GST run trained with ``--loss logmse`` on ``costmodel collect`` data
(:class:`mlsysopt.costmodel.latency.LatencyModel`). A run trained with a ranking loss is refused with the way out:
its scores order the configurations of one graph and are not milliseconds.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlsysopt.costmodel.latency import LatencyModel
from mlsysopt.costmodel.oracle.collect import read_onnx
from mlsysopt.costmodel.oracle.dataset import load_collection
from mlsysopt.costmodel.oracle.evaluate import accuracy, repeatability
from mlsysopt.costmodel.oracle.oracle import BUILTIN_NAMES, ORACLE_FILE, LatencyOracle, Prediction
from mlsysopt.costmodel.oracle.predictors import PREDICTORS, TRAIN_METHOD
from mlsysopt.costmodel.oracle.settings import SETTINGS, Setting
from mlsysopt.costmodel.oracle.timing import runners, time_model
from mlsysopt.errors import InvalidCheckpoint, InvalidOption
from mlsysopt.graph.importers.source import resolve_source


def load_oracle(run: str | Path | None = None) -> Any:
    """The oracle ``run`` names (see the module docstring).

    Args:
        run: ``None`` or ``builtin`` (the shipped oracle), an oracle folder, or a logmse GST run.

    Returns:
        Any: A :class:`~mlsysopt.costmodel.oracle.oracle.LatencyOracle`, or a
        :class:`~mlsysopt.costmodel.latency.LatencyModel` for a GST run.

    Raises:
        InvalidCheckpoint: If ``run`` is neither an oracle nor a GST run trained on times (one line, the way out).
    """
    if run is None or str(run) in BUILTIN_NAMES:
        return LatencyOracle.load(None)
    path = Path(run)
    if (path / ORACLE_FILE).is_file():
        return LatencyOracle.load(path)
    if not path.is_dir():
        raise InvalidCheckpoint(f"{run}: no such oracle folder (use 'builtin', or a folder written by 'costmodel "
                                "latency-train')")  # fmt: skip

    return LatencyModel(path)


def _oracle_of(run: str | Path | None) -> LatencyOracle:
    """The :class:`LatencyOracle` ``run`` names; a GST run is refused (it predicts what ``costmodel collect``
    recorded, not a model's latency under a setting)."""
    oracle = load_oracle(run)
    if not isinstance(oracle, LatencyOracle):
        raise InvalidCheckpoint(f"--run {run}: a GST run predicts what 'costmodel collect' recorded; 'costmodel "
                                "latency' needs an oracle ('builtin' or 'costmodel latency-train')")  # fmt: skip
    return oracle


def _graph_of(source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """``(ops, node table, edges, name)`` of a source at batch 1: an ONNX file is read; a PyTorch source is exported
    first (the export notes which nodes PyTorch eager runs fused)."""

    src = resolve_source(source)
    if src.kind == "onnx":
        ops, nodes, edges = read_onnx(Path(str(src.path)))
    elif src.kind == "pytorch":
        # deferred: imports numba, onnx, scipy, yaml
        from mlsysopt.graph.importers.onnx import export_onnx

        module, inputs = src.pytorch()
        one = tuple(x[:1] for x in inputs)
        with tempfile.TemporaryDirectory(prefix="mlsysopt-oracle-") as tmp:
            ops, nodes, edges = read_onnx(export_onnx(module.eval(), one, Path(tmp) / "model.onnx", dynamic_batch=True))
    else:
        raise InvalidOption(f"'{source}': the latency oracle predicts models (file.py:factory, .onnx, zoo:NAME), "
                            f"not a {src.kind} source")  # fmt: skip
    return ops, nodes, edges, src.name


def predict_source(source: str, setting: Setting, run: str | Path | None = None) -> tuple[Prediction, str]:
    """The prediction for ``source`` under ``setting`` and the oracle's name.

    Args:
        source: ``file.py:factory``, ``model.onnx`` or ``zoo:NAME``.
        setting: The setting to predict.
        run: The oracle (see :func:`load_oracle`).

    Returns:
        tuple[Prediction, str]: The prediction (ms, interval, out-of-distribution reasons) and the oracle's name.

    Raises:
        InvalidCheckpoint: If ``run`` cannot serve as an oracle.
        InvalidOption: If the source is not a model.
    """
    oracle, (ops, nodes, edges, name) = _oracle_of(run), _graph_of(source)
    return oracle.predict_graph(ops, nodes, setting, name, edges), str(oracle.run)


def predict_grid(source: str, run: str | Path | None = None) -> tuple[list[Prediction], str]:
    """The prediction for ``source`` under every setting the oracle learned, fastest first, and the oracle's name.

    Raises:
        InvalidCheckpoint: If ``run`` cannot serve as an oracle.
        InvalidOption: If the source is not a model.
    """
    oracle, (ops, nodes, edges, name) = _oracle_of(run), _graph_of(source)
    preds = [oracle.predict_graph(ops, nodes, s, name, edges) for s in oracle.settings]
    return sorted(preds, key=lambda p: p.ms), str(oracle.run)


def measure_source(source: str, setting: Setting, rounds: int = 3) -> float:
    """Milliseconds of one inference of ``source`` under ``setting``, timed here the way the collection times."""

    # deferred: imports numba, onnx, scipy, yaml
    from mlsysopt.graph.importers.onnx import export_onnx

    src = resolve_source(source)
    with tempfile.TemporaryDirectory(prefix="mlsysopt-oracle-") as tmp:
        if src.kind == "onnx":
            import onnxruntime as ort  # deferred: onnxruntime loads only when a model is timed

            path = Path(str(src.path))
            sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in sess.get_inputs()[0].shape]
            shape[0] = setting.batch
            x = torch.zeros(*shape)
            module = None
            if setting.engine == "torch":
                raise InvalidOption("--measure --engine torch needs a PyTorch source, not an ONNX file")
        else:
            module, inputs = src.pytorch()
            x = inputs[0][:1].expand(setting.batch, *inputs[0].shape[1:]).contiguous()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                path = export_onnx(module.eval(), (inputs[0][:1],), Path(tmp) / "m.onnx", dynamic_batch=True)
        run = runners(module, path, {setting.batch: x}, (setting,))
        times = time_model(run, rounds, np.random.default_rng(0))
    return float(np.median(times[setting.key]) * 1e3)


def train_oracle(data: str | Path, out: str | Path, method: str = TRAIN_METHOD, seed: int = 0) -> dict[str, Any]:
    """Fit ``method`` on a collection's train split, take the interval on its valid split, save into ``out``.

    Returns:
        dict[str, Any]: ``method``, ``train`` (models), ``valid_within10`` and ``valid_spearman`` of the oracle on the
        valid split, ``valid_repeatability`` (how often a re-measurement of a valid model lands within +-10% of its
        other rounds: the ruler ``valid_within10`` is read with; None without rounds) and ``out``.

    Raises:
        InvalidOption: If the method is unknown or a split is empty.
        InvalidDataset: If the collection cannot be read or mixes machines.
    """

    if method not in PREDICTORS:
        raise InvalidOption(f"--method must be one of {', '.join(PREDICTORS)}, got '{method}'")
    if Path(out).exists() and not Path(out).is_dir():
        raise InvalidOption(f"--out {out}: a file is there; the oracle is written into a folder")
    models, manifest = load_collection(data)
    train = [m for m in models if m.split == "train"]
    valid = [m for m in models if m.split == "valid"]
    if not train or not valid:
        raise InvalidOption(f"--data {data}: needs models in both the train and the valid split")
    settings = sorted({k for m in models for k in m.ms}, key=[s.key for s in SETTINGS].index)
    pred = PREDICTORS[method](seed=seed) if PREDICTORS[method].seeded else PREDICTORS[method]()
    oracle = LatencyOracle.fit(pred, train, valid, [Setting.parse(k) for k in settings], manifest.get("machine", ""))
    oracle.save(out)
    acc = accuracy(oracle.predictor, valid, oracle.settings)
    rep = repeatability(valid, oracle.settings)["within10"]
    return {"method": method, "train": len(train), "valid_within10": acc["within10"],
            "valid_spearman": acc["spearman"], "out": str(out),
            "valid_repeatability": None if np.isnan(rep) else rep}  # fmt: skip
