"""``mlsysopt nas export``: the best architecture of a search run folder, in forms usable outside mlsysopt.

What a search keeps: its checkpoint holds the index of the best evaluation and, for the CNN spaces, the weights that
evaluation trained (``state_dict``, with the input preprocessing it was trained with), saved whenever the best
changes. So the exported model is the very one whose accuracy the search recorded -- no retraining, which would
reproduce it only on the same CPU kernels. A finished search and one still running (or stopped) export alike: the
checkpoint is the source, and ``result.json``'s ``search_finished`` says which it was.

Written to ``--out`` (a run folder; nothing is created before the inputs are checked):

* CNN spaces: ``architecture.json`` (:data:`~mlsysopt.models.cnn_cell.ARCHITECTURE_FORMAT`: input shape,
  classes, stem, blocks, preprocessing), ``model_state_dict.pt`` (a plain ``torch.save`` of the state dict; loads with
  ``weights_only=True`` into :func:`~mlsysopt.models.cnn_cell.model_from_architecture`), ``model.onnx``
  (input ``input_0`` of shape ``[batch, C, H, W]``, output ``output_0`` ``[batch, classes]``, batch dynamic).
* NAS-Bench-Graph: ``architecture.json`` with the cell (``link``, ``ops``), its ``valid_hash`` and its table entry.
* Your own space (``--objective``): ``params.json`` (:data:`PARAMS_FORMAT`: the parameters your training function
  was called with, its value and resources) and, when it returned ``state_dict`` (or ``model``), ``state_dict.pt``
  -- the weights of the very training run that scored the recorded value.
* ``result.json``: where it came from and what was checked.

With ``verify`` (the default) the export proves itself before it keeps anything: the state dict, rebuilt from the
architecture JSON, must give exactly the validation and test accuracy the search recorded; ONNX Runtime must run
``model.onnx`` at batch 1 and at larger batches with logits matching PyTorch's and the same accuracy;
a NAS-Bench-Graph cell must hash to the recorded key and its table entry must hold the recorded performance.
A failed check is one error and leaves no file.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import InvalidDataset, InvalidRunDir, MlsysoptError
from mlsysopt.io import RunDir, load_torch, read_json, save_torch_atomic
from mlsysopt.nas.experiment import build_space
from mlsysopt.nas.search import read_checkpoint
from mlsysopt.nas.spaces.base import Evaluation
from mlsysopt.runtime.threads import torch_threads
from mlsysopt.store.run import RunStore

if TYPE_CHECKING:
    from mlsysopt.nas.spaces.base import SearchSpace

TABLE_FORMAT = "mlsysopt.nas.nasbench-graph/1"
PARAMS_FORMAT = "mlsysopt.nas.params/1"
ONNX_BATCHES = (1, 7, 256)  # ONNX Runtime runs 8 images one by one, 28 in sevens, then each whole set in 256s
LOGIT_TOL = 1e-4  # ONNX Runtime vs PyTorch logits: max |difference| / max(1, max |logit|)


@dataclass
class ExportJob:
    """A checked export, ready to write (:func:`prepare_export` builds it; nothing is written yet).

    Args:
        run_dir: The export's output folder (opened by :meth:`run`).
        source: The search run folder exported from.
        settings: The search run's ``settings.json``.
        best: The best evaluation of the search.
        best_index: Its position in the history.
        trained: Its trained model (``state_dict``, ``preprocessing``), or None when the space keeps none.
        space: The search space (None when it cannot be rebuilt).
        evaluated: Evaluations the search made.
        finished: Whether the search reached its budget.
        verify: Whether to check the written files (PyTorch and ONNX Runtime accuracy, logits) before finishing.
    """

    run_dir: RunDir
    source: Path
    settings: dict[str, Any]
    best: Evaluation
    best_index: int
    trained: dict[str, Any] | None
    space: SearchSpace | None
    evaluated: int
    finished: bool
    verify: bool

    def run(self) -> dict[str, Any]:
        """Write the files (checked first when ``verify``) and ``result.json``; returns what result.json holds."""
        with self.run_dir as out:
            record: dict[str, Any] = {
                "command": "nas export",
                "run": str(self.source),
                "space": self.settings["space"],
                "method": self.settings["method"],
                "seed": self.settings["seed"],
                "best_index": self.best_index,
                "evaluated": self.evaluated,
                "budget": self.settings["budget"],
                "search_finished": self.finished,
                "recorded": {"perf": self.best.perf, "test_perf": self.best.test_perf},
                "verified": self.verify,
            }
            if "objective" in self.settings:
                record |= _export_params(self, out)
            elif self.trained is None:
                record |= _export_table(self, out)
            else:
                record |= _export_cnn(self, out)
            out.write_json("result.json", record)
            record["files"] = [*record["files"], "result.json"]
        return record


def _checked_run(source: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(settings, checkpoint)`` of a ``nas search`` run folder, or one error saying why it is not one."""
    if not source.is_dir():
        raise InvalidRunDir(f"{source}: no such run folder" if not source.exists() else f"{source} is not a folder")
    settings_path, ckpt = source / "settings.json", source / "checkpoint.pt"
    if not settings_path.is_file() or not ckpt.is_file():
        missing = "settings.json" if not settings_path.is_file() else "checkpoint.pt"
        raise InvalidRunDir(
            f"{source} has no {missing}: not a 'nas search' run folder (or its first batch is not done)"
        )
    settings = read_json(settings_path, InvalidRunDir)
    need = ("space", "method", "seed", "budget", "space_options")
    missing_keys = [k for k in need if k not in settings]
    if missing_keys:
        raise InvalidRunDir(f"{settings_path}: not the settings of a 'nas search' (no {', '.join(missing_keys)})")
    return settings, read_checkpoint(ckpt)


def prepare_export(source: str | Path, out: str | Path, verify: bool = True) -> ExportJob:
    """Check the search run folder ``source`` and the output folder ``out``; build the space when verifying.

    Args:
        source: a ``nas search`` run folder (finished, stopped or still running: its checkpoint is read).
        out: the export's run folder.
        verify: check the exported files reproduce the recorded results (needs the search's data set).
    """
    source, out = Path(source), Path(out)
    if source.resolve() == out.resolve():
        raise InvalidRunDir(f"--out {out} is the search's own folder: export into another one")
    run = RunDir(
        out, {"command": "nas export", "run": str(source), "verify": bool(verify)}, checkpoint=None, sink=RunStore
    ).check()
    settings, ckpt = _checked_run(source)
    history = ckpt["history"]
    record = ckpt.get("best") or {}
    index = record.get("index")
    if index is None or not 0 <= int(index) < len(history):
        why = (
            "this search found no usable architecture yet" if record else "its checkpoint records no best architecture"
        )
        raise MlsysoptError(f"{source}: nothing to export ({why}; {len(history)} evaluation(s) so far)")
    best = Evaluation.from_dict(history[int(index)])
    trained = record.get("trained")
    table_space = str(settings["space"]).startswith("nasbench-graph")
    user_space = "objective" in settings
    if not table_space and not user_space and trained is None:
        raise MlsysoptError(f"{source}: the checkpoint keeps no trained weights of its best architecture")
    space = None
    if verify or table_space:
        try:
            space = build_space(settings["space"], settings["space_options"], settings.get("objective"),
                                settings.get("direction", "maximize"))  # fmt: skip
        except InvalidDataset as exc:
            raise InvalidDataset(
                f"{exc} (the export checks the model on the search's data; --no-verify skips it)"
            ) from None
        space.check(best.arch)
    finished = (source / "result.json").is_file() and _result_count(source) == len(history)
    return ExportJob(run, source, settings, best, int(index), trained, space, len(history), finished, bool(verify))


def _result_count(source: Path) -> int | None:
    try:
        return int(read_json(source / "result.json", InvalidRunDir).get("evaluated", -1))
    except (MlsysoptError, TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------- NAS-Bench-Graph
def _export_table(job: ExportJob, out: RunDir) -> dict[str, Any]:
    """architecture.json of a NAS-Bench-Graph cell, its table entry re-read and re-hashed."""
    import nas_bench_graph  # deferred: nas_bench_graph is optional and loads only for its table

    space = job.space
    assert space is not None
    link, ops = space.cell(job.best.arch)  # type: ignore[attr-defined]
    key = int(nas_bench_graph.Arch(link, ops).valid_hash())
    entry = space.table.get(key)  # type: ignore[attr-defined]
    recorded_key = job.best.extra.get("key")
    if entry is None or (recorded_key is not None and int(recorded_key) != key):
        raise MlsysoptError(
            f"{job.source}: cell link={link} ops={ops} hashes to {key}, not the recorded {recorded_key}"
        )
    if float(entry["valid_perf"]) != job.best.perf or float(entry["perf"]) != job.best.test_perf:
        raise MlsysoptError(
            f"{job.source}: the table entry of {key} holds valid {entry['valid_perf']}, test {entry['perf']}; "
            f"the search recorded {job.best.perf}, {job.best.test_perf}"
        )
    dataset = space.dataset  # type: ignore[attr-defined]
    arch = {
        "format": TABLE_FORMAT,
        "space": space.name,
        "dataset": dataset,
        "link": link,
        "ops": ops,
        "valid_hash": key,
        "blocks": job.best.arch.blocks,
        "arch": job.best.arch.to_dict(),
        "table_entry": {k: float(entry[k]) for k in ("valid_perf", "perf", "latency", "para")},
        "resources": {"params": float(round(float(entry["para"]) * 1e6)), "latency_ms": float(entry["latency"]) * 1e3},
        "units": {"latency": "s", "para": "million parameters", "latency_ms": "ms", "params": "parameters"},
        "read_with": f"nas_bench_graph.light_read({dataset!r})[nas_bench_graph.Arch(link, ops).valid_hash()]",
        "nas_bench_graph_version": _version("nas-bench-graph"),
    }
    out.write_json("architecture.json", arch)
    reproduced = {"perf": float(entry["valid_perf"]), "test_perf": float(entry["perf"]), "valid_hash": key}
    return {"files": ["architecture.json"], "reproduced": reproduced, "architecture": arch}


# ---------------------------------------------------------------------------- your own space
def _export_params(job: ExportJob, out: RunDir) -> dict[str, Any]:
    """params.json (the best trial's parameters, value, resources) and, when the objective returned weights,
    state_dict.pt; with ``verify`` the parameters are re-derived from the architecture by your space file."""
    best = job.best
    params = best.extra.get("params")
    if job.space is not None:
        again = job.space.decode(best.arch)
        if params is not None and again != params:
            raise MlsysoptError(f"{job.source}: the space now decodes the best architecture to {again}, not {params}")
        params = again
    if params is None:
        why = "the checkpoint keeps no parameters of its best trial (export with --verify)"
        raise MlsysoptError(f"{job.source}: {why}")
    doc = {
        "format": PARAMS_FORMAT,
        "space": job.settings["space"],
        "objective": job.settings["objective"],
        "direction": job.settings.get("direction", "maximize"),
        "params": params,
        "value": best.extra.get("value", best.perf),
        "test_value": best.extra.get("test_value"),
        "resources": best.resources,
        "arch": best.arch.to_dict(),
    }
    out.write_json("params.json", doc)
    files = ["params.json"]
    if job.trained is not None and job.trained.get("state_dict") is not None:
        save_torch_atomic(out.file("state_dict.pt"), job.trained["state_dict"])
        files.append("state_dict.pt")
    reproduced = {"params": params} if job.space is not None else None
    return {"files": files, "params": doc, **({"reproduced": reproduced} if reproduced else {})}


def _version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------- CNN spaces
def _export_cnn(job: ExportJob, out: RunDir) -> dict[str, Any]:
    """architecture.json, model_state_dict.pt and model.onnx; with ``verify`` each is checked against the record."""
    import torch  # deferred: torch loads only when a model is exported

    from mlsysopt.graph.importers.onnx import export_onnx  # deferred: mlsysopt.graph.importers.onnx imports onnx

    # deferred: mlsysopt.models.cnn_cell imports torch
    from mlsysopt.models.cnn_cell import check_architecture, model_from_architecture

    trained = job.trained
    assert trained is not None
    arch = check_architecture(_architecture(job, trained), "the checkpoint's architecture")
    model = model_from_architecture(arch)
    try:
        model.load_state_dict(trained["state_dict"], strict=True)
    except (RuntimeError, KeyError, TypeError) as exc:
        raise MlsysoptError(f"{job.source}: the kept weights do not fit the architecture ({exc})") from None
    model.eval()
    out.write_json("architecture.json", arch)
    save_torch_atomic(out.file("model_state_dict.pt"), {k: v.clone() for k, v in model.state_dict().items()})
    example = torch.zeros(2, *arch["input_shape"])
    export_onnx(model, (example,), out.file("model.onnx"), dynamic_batch=True)
    record: dict[str, Any] = {
        "files": ["architecture.json", "model_state_dict.pt", "model.onnx"],
        "architecture": arch,
        "onnx": {"input": "input_0", "output": "output_0", "input_shape": ["batch", *arch["input_shape"]]},
    }
    if job.verify:
        record["reproduced"] = _verify_cnn(job, out)
    return record


def _architecture(job: ExportJob, trained: dict[str, Any]) -> dict[str, Any]:
    """The architecture JSON the search kept with the weights, with the preprocessing and how it was trained."""
    arch = dict(trained.get("architecture") or {})
    arch["preprocessing"] = trained.get("preprocessing")
    arch["trained"] = {
        "seed": job.settings["seed"],
        "validation_accuracy": job.best.perf,
        "test_accuracy": job.best.test_perf,
        **{k: job.settings["space_options"][k] for k in ("epochs", "lr") if k in job.settings["space_options"]},
    }
    return arch


def _verify_cnn(job: ExportJob, out: RunDir) -> dict[str, Any]:
    """Reload both files the way a user would and compare their accuracy with what the search recorded."""
    import onnxruntime as ort  # deferred: onnxruntime loads only when an export is verified
    import torch  # deferred: torch loads only when an export is verified

    # deferred: mlsysopt.models.cnn_cell imports torch
    from mlsysopt.models.cnn_cell import accuracy, model_from_architecture

    space = job.space
    assert space is not None
    split = space.dataset()  # type: ignore[attr-defined]
    model = model_from_architecture(out.file("architecture.json"))
    model.load_state_dict(load_torch(out.file("model_state_dict.pt"), MlsysoptError), strict=True)
    sets = {"perf": (split.x_valid, split.y_valid), "test_perf": (split.x_test, split.y_test)}
    with torch_threads(space.threads):  # type: ignore[attr-defined]
        torch_acc = {k: accuracy(model, torch.from_numpy(x), torch.from_numpy(y)) for k, (x, y) in sets.items()}
        with torch.no_grad():
            logits = {k: model(torch.from_numpy(x)).numpy() for k, (x, _) in sets.items()}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    session = ort.InferenceSession(str(out.file("model.onnx")), opts, providers=["CPUExecutionProvider"])
    onnx_acc, worst = {}, 0.0
    for k, (x, y) in sets.items():
        for batch, n in zip(ONNX_BATCHES, (8, 28, len(x)), strict=True):  # the last pass covers the whole set
            got = np.concatenate([session.run(None, {"input_0": x[i : i + batch]})[0] for i in range(0, n, batch)])
            ref = logits[k][:n]
            worst = max(worst, float(np.abs(got - ref).max() / max(1.0, float(np.abs(ref).max()))))
        onnx_acc[k] = int((got.argmax(1) == y).sum()) / max(len(y), 1)
    recorded = {"perf": job.best.perf, "test_perf": job.best.test_perf}
    for name, got in (("PyTorch (model_state_dict.pt)", torch_acc), ("ONNX Runtime (model.onnx)", onnx_acc)):
        for k, want in recorded.items():
            if want is None or got[k] != want:
                what = "validation" if k == "perf" else "test"
                raise MlsysoptError(f"{name} gives {what} accuracy {got[k]:.6g}; the search recorded {want}")
    if worst > LOGIT_TOL:
        raise MlsysoptError(f"ONNX Runtime's logits differ from PyTorch's by {worst:.3g} (relative; limit {LOGIT_TOL})")
    return {
        "pytorch": torch_acc,
        "onnx_runtime": onnx_acc,
        "onnx_batches_checked": list(ONNX_BATCHES),
        "onnx_max_logit_difference": worst,
    }


def load_exported_cnn(folder: str | Path) -> Any:
    """The exported CNN of ``folder`` as a ready ``nn.Module`` (eval mode): architecture.json + model_state_dict.pt.

    Args:
        folder: An export folder holding ``architecture.json`` and ``model_state_dict.pt``.

    Returns:
        Any: The ``nn.Module`` with the trained weights, in eval mode.

    Raises:
        MlsysoptError: If a file is missing or unreadable, or the weights do not match the architecture.
    """
    from mlsysopt.models.cnn_cell import model_from_architecture  # deferred: mlsysopt.models.cnn_cell imports torch

    folder = Path(folder)
    model = model_from_architecture(folder / "architecture.json")
    model.load_state_dict(load_torch(folder / "model_state_dict.pt", MlsysoptError), strict=True)
    return model.eval()


__all__ = ["ExportJob", "load_exported_cnn", "prepare_export"]
