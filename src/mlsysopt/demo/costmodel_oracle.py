"""The cost model as another system's oracle, in ``mlsysopt demo``: predicted vs measured ONNX Runtime settings.

Called by :func:`mlsysopt.demo.costmodel.demo_section` after the quality section, on the same REAL subset: a GNN
trained with ``--loss logmse`` (absolute times, what ``serving tune --cost-model`` and ``nas search
--latency-model`` need) predicts one inference of the zoo CNN under each op-level setting of a serving space on
this machine (intra-op threads x sequential/parallel execution); each setting is then timed here with ONNX
Runtime. The table says which settings ``serving tune --cost-model`` would keep (within the default tolerance of
the predicted best, plus the default's own) and whether the measured fastest is among them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mlsysopt.report.html import Section

if TYPE_CHECKING:
    from mlsysopt.demo import DemoContext

EPOCHS = 2
ROUNDS = 5  # timing rounds per setting (fresh random order each)


def oracle_section(ctx: DemoContext, data: Path) -> Section:
    """Predicted vs measured ms of the zoo CNN under every op-level setting; what ``--cost-model`` keeps."""
    from scipy.stats import spearmanr

    from mlsysopt.costmodel import TrainConfig, train
    from mlsysopt.costmodel.collection.engines import OrtEngine, time_configs
    from mlsysopt.serving.cost_model import DEFAULT_TOLERANCE, op_label, op_level_shortlist
    from mlsysopt.serving.model import export_zoo_onnx
    from mlsysopt.serving.space import Space

    ctx.step("costmodel: a latency model (logmse) as the oracle of serving's op-level knobs")
    cores = os.cpu_count() or 1
    space = Space.for_machine(cores)
    # the model and the export live in a temporary folder: the page shows every PNG of the demo folder, and this
    # run's training plots are not part of it
    with tempfile.TemporaryDirectory(prefix="mlsysopt-demo-oracle-") as tmp:
        run = Path(tmp) / "latency"
        train(data, run, TrainConfig(loss="logmse", epochs=EPOCHS, finetune_epochs=0, seed=ctx.seed))
        onnx = export_zoo_onnx("cnn", Path(tmp) / "cnn.onnx")
        short = op_level_shortlist(run, onnx, space, cores, DEFAULT_TOLERANCE)
        configs = np.array([(3, i, m) for i, m, _ in short.predicted], np.int64)
        measured = time_configs(OrtEngine(onnx, "cnn"), configs, ROUNDS, ctx.rng(41)).mean(axis=1) * 1e3
    predicted = np.array([ms for _, _, ms in short.predicted])
    kept = set(short.kept)
    fastest = short.predicted[int(np.argmin(measured))][:2]
    rho = float(spearmanr(predicted, measured).statistic) if len(predicted) > 2 else float("nan")
    rows = [
        [op_label(i, m), p, float(t), "yes" if (i, m) in kept else "no"]
        for (i, m, p), t in zip(short.predicted, measured, strict=True)
    ]
    ctx.results["costmodel_oracle"] = {
        "data": "REAL: predicted by a model trained on the shipped real:cpu subset; measured here (ONNX Runtime)",
        "model": "zoo:cnn",
        "epochs": EPOCHS,
        "shortlist": short.to_dict() | {"run": "a temporary run trained by the demo"},
        "measured_ms": {f"{i},{m}": float(t) for (i, m, _), t in zip(short.predicted, measured, strict=True)},
        "spearman": rho,
        "measured_fastest_kept": fastest in kept,
    }
    text = (
        f"A GNN trained for {EPOCHS} epochs with an absolute loss (logmse) on the same real subset predicts one "
        f"inference of the zoo CNN under each op-level setting of a {cores}-core serving space; each is then "
        f"timed here with ONNX Runtime ({ROUNDS} rounds). `serving tune --cost-model RUN` keeps the settings "
        f"predicted within {DEFAULT_TOLERANCE:.0%} of the best and the default's own: {len(kept)} of "
        f"{len(rows)} here, the measured fastest {'among them' if fastest in kept else 'NOT among them'}. "
        f"Rank correlation predicted vs measured: {rho:.2f}. The collection's models are PyTorch CNNs timed under "
        "memory formats and threads, so an ONNX session is outside what this small model was trained on."
    )
    return Section(
        heading="Cost model as an oracle: predicted vs measured ONNX Runtime settings (what --cost-model keeps)",
        text=text,
        table=rows,
        columns=["setting", "predicted ms", "measured ms", "kept"],
        anchor="costmodel-oracle",
    )
