"""The latency oracle as another system's oracle, in ``mlsysopt demo``: predicted vs measured ONNX Runtime settings.

Called by :func:`mlsysopt.demo.costmodel.demo_section` after the quality section: the oracle shipped with mlsysopt
(``builtin``: trained on the real latency collection ``real:cpu``, picked on validation models by
``benchmarks/latency_oracle.py``) predicts one inference of the zoo CNN under each op-level setting of a serving
space on this machine (intra-op threads x sequential/parallel execution); each setting is then timed here with ONNX
Runtime the way the collection times. The table says which settings ``serving tune --cost-model builtin`` would
keep (within the default tolerance of the predicted best, plus the default's own) and whether the measured fastest
is among them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from scipy.stats import spearmanr

from mlsysopt.costmodel.oracle.settings import Setting
from mlsysopt.report.html import Section
from mlsysopt.serving.cost_model import DEFAULT_TOLERANCE, op_label, op_level_shortlist
from mlsysopt.serving.space import Space

if TYPE_CHECKING:
    from mlsysopt.demo import DemoContext

ROUNDS = 5  # timing rounds per setting (fresh random order each)


def oracle_section(ctx: DemoContext, data: Path) -> Section:
    """Predicted vs measured ms of the zoo CNN under every op-level setting; what ``--cost-model builtin`` keeps."""
    # deferred: imports torch
    from mlsysopt.costmodel.oracle.oracle import LatencyOracle
    from mlsysopt.costmodel.oracle.timing import runners, time_model

    # deferred: imports onnxruntime
    from mlsysopt.serving.model import export_zoo_onnx

    ctx.step("costmodel: the shipped latency oracle as the oracle of serving's op-level knobs")
    cores = os.cpu_count() or 1
    space = Space.for_machine(cores)
    with tempfile.TemporaryDirectory(prefix="mlsysopt-demo-oracle-") as tmp:
        onnx = export_zoo_onnx("cnn", Path(tmp) / "cnn.onnx")
        short = op_level_shortlist("builtin", onnx, space, cores, DEFAULT_TOLERANCE)
        settings = tuple(Setting("onnxruntime", i, "par" if m else "seq", 1) for i, m, _ in short.predicted)
        import onnxruntime as ort  # deferred: onnxruntime loads only in this section
        import torch  # deferred: torch loads only in this section

        dims = ort.InferenceSession(str(onnx)).get_inputs()[0].shape
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in dims]
        run = runners(None, onnx, {1: torch.zeros(*shape)}, settings)  # type: ignore[arg-type]
        times = time_model(run, ROUNDS, ctx.rng(41))
    measured = np.array([np.median(times[s.key]) * 1e3 for s in settings])
    predicted = np.array([ms for _, _, ms in short.predicted])
    kept = set(short.kept)
    fastest = short.predicted[int(np.argmin(measured))][:2]
    rho = float(spearmanr(predicted, measured).statistic) if len(predicted) > 2 else float("nan")
    rows = [
        [op_label(i, m), p, float(t), "yes" if (i, m) in kept else "no"]
        for (i, m, p), t in zip(short.predicted, measured, strict=True)
    ]
    within10 = float(np.mean(np.abs(predicted / measured - 1) <= 0.10))
    ctx.results["costmodel_oracle"] = {
        "data": "REAL: predicted by the shipped oracle (trained on real:cpu); measured here (ONNX Runtime)",
        "model": "zoo:cnn",
        "shortlist": short.to_dict(),
        "measured_ms": {f"{i},{m}": float(t) for (i, m, _), t in zip(short.predicted, measured, strict=True)},
        "spearman": rho,
        "within10": within10,
        "measured_fastest_kept": fastest in kept,
    }
    text = (
        f"The latency oracle shipped with mlsysopt ({short.run}, method "
        f"{LatencyOracle.load().meta.get('method', 'unknown')}, picked on validation models) predicts one "
        f"inference of the zoo CNN under each "
        f"op-level setting of a {cores}-core serving space; each is then timed here with ONNX Runtime ({ROUNDS} "
        f"rounds). {within10:.0%} of the predictions are within 10% of the measured time; rank correlation "
        f"{rho:.2f}. `serving tune --cost-model builtin` keeps the settings predicted within "
        f"{DEFAULT_TOLERANCE:.0%} of the best and the default's own: {len(kept)} of {len(rows)} here, the measured "
        f"fastest {'among them' if fastest in kept else 'NOT among them'}."
    )
    return Section(
        heading="The latency oracle: predicted vs measured ONNX Runtime settings (what --cost-model builtin keeps)",
        text=text,
        table=rows,
        columns=["setting", "predicted ms", "measured ms", "kept"],
        anchor="costmodel-oracle",
    )
