"""The report of a finished ``serving tune``: ``result.json``, the figures, and the deployment files of the verdict.

Deployment files (only when the verdict recommends a configuration, or ``--export-anyway``): ONNX Runtime session
options, Triton's ``config.pbtxt`` and, for a real model, the Ray Serve deployment (``rayserve/``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlsysopt.io import to_jsonable
from mlsysopt.serving.deploy import ort_session_json, triton_config
from mlsysopt.serving.experiment import plot_tuning
from mlsysopt.serving.rayserve_config import model_inputs, write_deployment
from mlsysopt.serving.tuning_phases import top_predicted
from mlsysopt.serving.verdict import noise_warning, verdict

if TYPE_CHECKING:
    from mlsysopt.io import RunDir
    from mlsysopt.serving.confirmation import Confirmation
    from mlsysopt.serving.prior import TaskPrior
    from mlsysopt.serving.profile import ServiceProfile
    from mlsysopt.serving.tuning import TuneResult

RAYSERVE_FOLDER = "rayserve"  # serve_config.yaml, the application module it imports, the model


def tune_report(
    job: Any,
    run: RunDir,
    result: TuneResult,
    confirmations: list[Confirmation],
    noise: dict[str, Any],
    replayed: int,
    seconds: float,
    search_s: float,
    task: ServiceProfile,
    prior: TaskPrior | None,
) -> dict[str, Any]:
    """Write ``result.json``, the figures and the deployment files of a finished tune; return the report.

    Args:
        job: The :class:`~mlsysopt.serving.tuning_job.TuningJob` (its objective, space, settings, model stage
            and backend; typed loosely: the job module imports this one).
        run: The open run folder.
        result: The search's result.
        confirmations: One confirmation per rate.
        noise: The noise phase's figures.
        replayed: Search measurements replayed from the checkpoint.
        seconds: Wall clock of the whole run.
        search_s: Wall clock of the search.
        task: The task's service profile.
        prior: The bound prior (None: cold).

    Returns:
        dict[str, Any]: The report written as ``result.json``.
    """
    # deferred: imports PIL, matplotlib
    from mlsysopt.serving.figures import plot_confirmation

    obj, last = job.objective, confirmations[-1]
    plot_tuning(
        result, job.space, run.file("steps.png"), run.file("heatmap.png"), name=job.tuner_name,
        title=f"{job.tuner_name} on the {job.kind} engine", ylabel=obj.label, slo_ms=obj.slo_ms,
        heatmap_title=f"search at {result.per_rate[-1].workload.rate:g} req/s: best {obj.label} per "
        "(instances, max batch); blank = not measured or SLO missed", unit=obj.unit,
        better="higher" if obj.kind == "throughput" else "lower",
    )  # fmt: skip
    plot_confirmation(last, obj, run.file("confirm.png"))
    runtime = "Ray Serve" if job.kind == "rayserve" else "ONNX Runtime"
    verdicts = [verdict(c, obj, runtime) for c in confirmations]
    final = verdicts[-1]
    pick = last.pick
    files = ["steps.png", "heatmap.png", "confirm.png"]
    if final.export or job.export_anyway:
        name = job.stage.model.path.stem if job.stage is not None else "model"
        chosen = final.recommended.config
        run.write_json("ort_session_options.json", ort_session_json(chosen))
        (run.file("config.pbtxt")).write_text(triton_config(chosen, name))
        files += ["ort_session_options.json", "config.pbtxt"]
        if job.stage is not None:  # a real model: the Ray Serve deployment of the chosen configuration
            model = job.stage.model
            files += write_deployment(chosen, model.path, model_inputs(model), run.file(RAYSERVE_FOLDER))
    slo_met = pick.meets_slo
    warnings = [w for w in [noise_warning(noise, job.rounds, job.confirm_rounds)] if w]
    message = f"{final.words} (at {last.workload.rate:g} req/s)"
    per_rate = []
    for ans, conf, v in zip(result.per_rate, confirmations, verdicts, strict=True):
        per_rate.append(
            {
                "rate": ans.workload.rate,
                "search_best": ans.best.to_dict(),
                "search_value": ans.score,
                "search": obj.describe(ans.score),
                "confirmed_best": conf.pick.config.to_dict(),
                "confirmed_value": conf.pick.value,
                "confirmed_interval": list(conf.pick.interval),
                "confirmed": obj.describe(conf.pick.value),
                "default_confirmed_value": conf.default_candidate.value,
                "default_confirmed_interval": list(conf.default_candidate.interval),
                "default_confirmed": obj.describe(conf.default_candidate.value),
                "slo_met": conf.pick.meets_slo,
                "verdict": v.decision,
                "verdict_words": v.words,
                "recommended": v.recommended.config.to_dict(),
                "measured_configurations": len(ans.measured),
            }
        )
    report = to_jsonable(
        {
            "command": "serving tune",
            "backend": job.backend.describe(),
            "settings": job.settings,
            "seconds": seconds,
            "search_seconds": search_s,
            "stopped": "timeout" if result.stopped == "until" else result.stopped,
            "stopped_by": "timeout" if result.stopped == "until" else result.stopped,  # the name every search uses
            "replayed_from_checkpoint": replayed,
            "task": {"profile": task.to_dict(), "source": "profile" if job.profile is not None else "probe"},
            "prior": None if prior is None else {**prior.prior.describe(), "top": top_predicted(prior, job, result)},
            "cost_model": None if job.shortlist is None else job.shortlist.to_dict(),
            "noise": noise,
            "confirm_rounds": job.rounds,
            "warnings": warnings,
            "space": job.space.reduction,
            "objective": obj.to_dict(),
            "best": pick.config.to_dict(),
            "best_measurement": pick.measurement.to_dict(),
            "confirmed_value": pick.value,
            "confirmed_interval": list(pick.interval),
            "slo_met": slo_met,
            "verdict": final.to_dict(obj),
            "recommended": final.recommended.config.to_dict(),
            "message": message,
            "per_rate": per_rate,
            "search": {"per_rate": [a.to_dict() for a in result.per_rate], "message": result.message},
            "confirmation": [c.to_dict(obj) for c in confirmations],
            "measurements": [s.measurement.to_dict() for s in result.steps],
            "files": files,
        }
    )
    run.write_json("result.json", report)
    return report
