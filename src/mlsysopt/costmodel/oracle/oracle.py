"""The latency oracle: predicted milliseconds of any model (PyTorch source, ONNX file, zoo) under any setting.

:class:`LatencyOracle` wraps a fitted predictor (:mod:`.predictors`) with what it learned from: the settings, the
op categories and the FLOPs range of its training models, and its residual quantiles on validation models (the
interval). A model outside that -- an op no category covers, a category no training model had, FLOPs beyond the
range, a setting never recorded, or (PyTorch eager only) the ops of a module PyTorch runs as a few kernels when the
collection timed none (the ``fused`` category, :mod:`mlsysopt.graph.importers.fused_modules`) -- is *out of
distribution*: the prediction carries the reasons, the interval is widened and a
:class:`~mlsysopt.errors.MlsysoptWarning` says so once. A setting the training models' rounds show *stalling* on an op
kind (:func:`stalls`) raises the upper end for a model holding it, with a warning.

The oracle shipped with mlsysopt (:data:`SHIPPED_ORACLE`, ``builtin`` on the command line) was trained on the
shipped ``real:cpu`` latency collection by ``benchmarks/latency_oracle.py``, which picked its method on validation
models; it predicts *this* machine class (the CPU in its ``oracle.json``).
"""

from __future__ import annotations

import gzip
import json
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlsysopt.costmodel.oracle.additive_mlp import AdditiveMLP
from mlsysopt.costmodel.oracle.collect import read_onnx
from mlsysopt.costmodel.oracle.dataset import TimedModel
from mlsysopt.costmodel.oracle.features import CATEGORIES, categories, per_category, unknown_ops
from mlsysopt.costmodel.oracle.gnn import GraphSAGELatency
from mlsysopt.costmodel.oracle.predictors import LatencyPredictor, from_dict
from mlsysopt.costmodel.oracle.settings import Setting
from mlsysopt.errors import InvalidCheckpoint, MlsysoptWarning
from mlsysopt.io.files import write_atomic

# the GNN and the additive MLP register themselves in PREDICTORS on import
__all__ = ["AdditiveMLP", "GraphSAGELatency", "LatencyOracle", "Prediction"]
SHIPPED_ORACLE = Path(__file__).resolve().parent.parent / "data" / "latency_oracle"
ORACLE_FILE = "oracle.json.gz"
#: Names that select the shipped oracle where a run folder is expected.
BUILTIN_NAMES = ("builtin", "real:cpu")
#: How far an out-of-distribution interval is widened (a factor on each side).
OOD_WIDEN = 3.0
#: A setting *stalls* an op category when at least STALL_SHARE of the training models holding it (and STALL_LIFT times
#: the share of all models, of at least STALL_MODELS) had a round STALL_RATIO times slower than another of its rounds:
#: e.g. ONNX Runtime's parallel executor with 2 intra-op threads on a 2-core machine runs a GRU's single runs in
#: steps of 8 ms, so a model's median lands in either mode.
STALL_SHARE, STALL_LIFT, STALL_MODELS, STALL_RATIO = 0.10, 5.0, 20, 3.0
#: What an op category no training model had means, where the name alone does not say.
_CATEGORY_NOTES = {
    "fused": "fused (ops of nn.TransformerEncoderLayer or nn.MultiheadAttention, which PyTorch eager runs as a "
    "few kernels)"
}


@dataclass
class Prediction:
    """One predicted latency.

    Args:
        ms: Predicted milliseconds per inference.
        low: Lower end of the interval (ms).
        high: Upper end (ms).
        setting: The setting predicted (its key).
        ood: Why the model is out of distribution (empty when it is not).
    """

    ms: float
    low: float
    high: float
    setting: str
    ood: list[str] = field(default_factory=list)
    stalls: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with units."""
        return {"predicted_ms": self.ms, "interval_ms": [self.low, self.high], "setting": self.setting,
                "out_of_distribution": self.ood, "stalls": self.stalls}  # fmt: skip


def stalls(train: list[TimedModel], settings: list[Setting]) -> dict[str, dict[str, list[float]]]:
    """The op categories each setting stalls (see :data:`STALL_SHARE`), from the training models' rounds.

    Returns:
        dict: ``{setting: {category: [share of the models holding it that stalled, median ms their slowest round
        took beyond their fastest]}}``; empty for a collection that kept no rounds.
    """
    out: dict[str, dict[str, list[float]]] = {}
    for s in settings:
        timed = [m for m in train if len(m.rounds.get(s.key, ())) > 1]
        if len(timed) < STALL_MODELS:
            continue
        spread = {m.name: max(m.rounds[s.key]) / max(min(m.rounds[s.key]), 1e-12) for m in timed}
        overall = np.mean([v > STALL_RATIO for v in spread.values()])
        holding: dict[str, list[TimedModel]] = {}
        for m in timed:
            for c in {CATEGORIES[c] for c in categories(m.ops, m.nodes, s.engine)}:
                holding.setdefault(c, []).append(m)
        for c, ms in holding.items():
            stalled = [m for m in ms if spread[m.name] > STALL_RATIO]
            share = len(stalled) / len(ms)
            if len(ms) >= STALL_MODELS and share >= STALL_SHARE and share >= STALL_LIFT * overall:
                extra = [max(m.rounds[s.key]) - min(m.rounds[s.key]) for m in stalled]
                out.setdefault(s.key, {})[c] = [share, float(np.median(extra))]
    return out


class LatencyOracle:
    """A fitted latency predictor and the bounds of what it learned.

    Args:
        predictor: The fitted predictor.
        meta: ``settings`` (keys trained), ``categories`` (op categories seen), ``gflops_range`` (per sample),
            ``residual_q`` ([q05, q95] of log(measured / predicted) on validation models), ``method``, ``machine``,
            ``stalls`` (:func:`stalls`: op kinds a setting stalls on; a prediction for a model holding one raises its
            upper end by the stall and says so).
    """

    def __init__(self, predictor: LatencyPredictor, meta: dict[str, Any]) -> None:
        self.predictor, self.meta = predictor, meta
        self.settings = [Setting.parse(k) for k in meta["settings"]]
        self.run = meta.get("path", "builtin")

    # ------------------------------------------------------------------ building, saving, loading
    @classmethod
    def fit(cls, predictor: LatencyPredictor, train: list[TimedModel], valid: list[TimedModel],
            settings: list[Setting], machine: str = "", fitted: bool = False) -> LatencyOracle:  # fmt: skip
        """Fit ``predictor`` on ``train`` and take the interval from its residuals on ``valid``.

        Args:
            predictor: The latency predictor (unfitted, or already fitted on ``train`` with ``fitted=True``).
            train: The models it learns from (their categories and sizes define what is in distribution).
            valid: Models it never saw, whose residuals give the interval.
            settings: The settings it predicts.
            machine: Where the collection was measured (recorded in the oracle).
            fitted: Skip the fit: ``predictor`` was fitted on ``train`` already (a benchmark reuses its fit).

        Returns:
            LatencyOracle: The oracle, its interval and the bounds of its training distribution in ``meta``.
        """
        if not fitted:
            predictor.fit(train, settings)
        engines = sorted({s.engine for s in settings})
        seen = sorted({CATEGORIES[c] for m in train for e in engines for c in categories(m.ops, m.nodes, e)})
        gf = [per_category(m.ops, m.nodes, 1)[:, 1].sum() for m in train]
        res = [np.log(m.ms[s.key] / predictor.predict(m.ops, m.nodes, s, m.edges)) for m in valid for s in settings
               if s.key in m.ms]  # fmt: skip
        q = np.quantile(res, [0.05, 0.95]).tolist() if res else [-0.2, 0.2]
        meta = {"method": predictor.name, "settings": [s.key for s in settings], "categories": seen,
                "gflops_range": [float(min(gf)), float(max(gf))], "residual_q": q, "machine": machine,
                "trained_models": len(train), "valid_models": len(valid),
                "stalls": stalls(train, settings)}  # fmt: skip
        return cls(predictor, meta)

    def save(self, folder: str | Path) -> Path:
        """Write ``oracle.json.gz`` (meta and predictor) into ``folder``."""

        path = Path(folder) / ORACLE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = json.dumps({"meta": self.meta, "predictor": self.predictor.to_dict()}).encode()
        return write_atomic(path, gzip.compress(blob, mtime=0))

    @classmethod
    def load(cls, folder: str | Path | None = None) -> LatencyOracle:
        """The oracle in ``folder`` (the shipped one when None or a :data:`BUILTIN_NAMES` name).

        Raises:
            InvalidCheckpoint: If the folder holds no oracle or a damaged one.
        """
        where = SHIPPED_ORACLE if folder is None or str(folder) in BUILTIN_NAMES else Path(folder)
        path = where / ORACLE_FILE
        if not path.is_file():
            raise InvalidCheckpoint(f"{where}: no {ORACLE_FILE} (a latency oracle is written by 'costmodel "
                                    "latency-train' or shipped as 'builtin')")  # fmt: skip
        try:
            d = json.loads(gzip.decompress(path.read_bytes()))
            meta, pred = d["meta"], d["predictor"]
        except Exception as exc:
            raise InvalidCheckpoint(f"{path}: not a latency oracle ({type(exc).__name__})") from None
        out = cls(from_dict(pred), meta)
        out.run = "builtin" if where == SHIPPED_ORACLE else str(where)
        return out

    # ------------------------------------------------------------------ predicting
    def _ood(self, ops: np.ndarray, nodes: np.ndarray, s: Setting) -> list[str]:
        why = []
        unknown = unknown_ops(ops)
        if unknown:
            why.append(f"ops the oracle never saw: {', '.join(unknown)}")
        new = sorted({CATEGORIES[c] for c in categories(ops, nodes, s.engine)} - set(self.meta["categories"])
                     - {"unknown"})  # fmt: skip
        if new:
            why.append(f"op kinds no training model had: {', '.join(_CATEGORY_NOTES.get(c, c) for c in new)}")
        gf = per_category(ops, nodes, 1)[:, 1].sum()
        lo, hi = self.meta["gflops_range"]
        if not lo / 2 <= gf <= hi * 2:
            why.append(f"{gf * 1e3:.3g} MFLOPs per sample, outside the trained {lo * 1e3:.3g}-{hi * 1e3:.3g}")
        if s.key not in self.meta["settings"]:
            why.append(f"setting {s.key} was never recorded (predicted from the nearest recorded one)")
        return why

    def predict_graph(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting, name: str = "model",
                      edges: np.ndarray | None = None) -> Prediction:  # fmt: skip
        """The prediction for a node table (``ops``, ``nodes`` at batch 1, ``edges``) under ``setting``; warns once
        when the model is out of distribution.

        Args:
            ops, nodes, edges: The model's graph (:func:`~mlsysopt.costmodel.oracle.collect.read_onnx`).
            setting: The setting predicted.
            name: The model's name in the warning.
        """
        ms = float(self.predictor.predict(ops, nodes, setting, edges))
        q05, q95 = self.meta["residual_q"]
        low, high = ms * float(np.exp(q05)), ms * float(np.exp(q95))
        ood = self._ood(ops, nodes, setting)
        if ood:
            low, high = low / OOD_WIDEN, high * OOD_WIDEN
            warnings.warn(f"{name}: outside what the latency oracle learned ({'; '.join(ood)}): the interval is "
                          f"widened {OOD_WIDEN:g}x each way", MlsysoptWarning, stacklevel=2)  # fmt: skip
        stalled = self._stalls(ops, nodes, setting)
        why = []
        for c, (share, extra_ms) in stalled.items():
            high = max(high, ms + extra_ms)
            why.append(f"{share:.0%} of the training models with {c} ops had a round {extra_ms:.3g} ms slower than "
                       "another")  # fmt: skip
        if why:
            warnings.warn(f"{name}: under {setting.key} {'; '.join(why)} (the engine stalls on this machine; "
                          f"another setting is steadier): the upper end is raised to {high:.4g} ms", MlsysoptWarning,
                          stacklevel=2)  # fmt: skip
        return Prediction(ms, low, high, setting.key, ood, why)

    def _stalls(self, ops: np.ndarray, nodes: np.ndarray, s: Setting) -> dict[str, list[float]]:
        known = self.meta.get("stalls", {}).get(s.key, {})
        if not known:
            return {}
        return {c: known[c] for c in sorted({CATEGORIES[c] for c in categories(ops, nodes, s.engine)}) if c in known}

    def per_op_ms(self, ops: np.ndarray, nodes: np.ndarray, setting: Setting,
                  edges: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
        """Every node's share of the predicted milliseconds (they sum to the prediction): the predictor's own
        per-op times (:meth:`~mlsysopt.costmodel.oracle.predictors.LatencyPredictor.per_op`), a negative one as 0.

        Shapes:
            returns (n,) ms
        """
        own = self.predictor.per_op(ops, nodes, setting, edges)
        parts = np.maximum(own, 0.0)
        return parts * (own.sum() / max(parts.sum(), 1e-12))

    def predict_onnx(self, path: str | Path, setting: Setting) -> Prediction:
        """The prediction for an ONNX file (read at batch 1; ``setting.batch`` scales it). Which nodes PyTorch eager
        runs fused comes from the file's metadata (mlsysopt's export writes it; another file has none)."""

        ops, nodes, edges = read_onnx(Path(path))
        return self.predict_graph(ops, nodes, setting, Path(path).name, edges)

    def predict_module(self, module: Any, inputs: tuple[Any, ...], setting: Setting, name: str = "model") -> Prediction:
        """The prediction for a PyTorch module (exported to ONNX at batch 1 in a temporary folder)."""
        # deferred: imports numba, onnx, scipy, yaml
        from mlsysopt.graph.importers.onnx import export_onnx

        one = tuple(x[:1] for x in inputs)
        with tempfile.TemporaryDirectory(prefix="mlsysopt-oracle-") as tmp:
            path = export_onnx(module.eval(), one, Path(tmp) / f"{name}.onnx", dynamic_batch=True)
            return self.predict_onnx(path, setting)

    def torch_ms(self, module: Any, inputs: tuple[Any, ...], name: str = "model") -> float:
        """Predicted ms of one PyTorch eager forward pass on ``inputs`` with 1 thread (what NAS measures)."""
        batch = int(inputs[0].shape[0]) if getattr(inputs[0], "ndim", 0) else 1
        return self.predict_module(module, inputs, Setting("torch", 1, "seq", batch), name).ms

    def session_ms(self, onnx_path: str | Path, settings: list[tuple[int, int]], batch: int = 1) -> np.ndarray:
        """Predicted ms of one ONNX Runtime inference for each ``(intra_threads, parallel)`` setting."""

        ops, nodes, edges = read_onnx(Path(onnx_path))
        return np.array([self.predict_graph(ops, nodes, Setting("onnxruntime", int(t), "par" if p else "seq", batch),
                                            Path(onnx_path).name, edges).ms for t, p in settings])  # fmt: skip
