"""RRL: SLO-aware tuning of request- and op-level parallelism of a served model (ONNX Runtime or its model).

Every name below is imported on first use, so ``import mlsysopt.serving`` loads neither ONNX Runtime nor torch::

    from mlsysopt.serving import RRL, Objective, ServiceProfile, SimulatedEngine, Space, Workload, tune
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsysopt.lazy import lazy_exports

_EXPORTS = {
    # the space, the workload and what a tuner minimizes
    "KNOBS": "mlsysopt.serving.space",
    "Config": "mlsysopt.serving.space",
    "Space": "mlsysopt.serving.space",
    "Workload": "mlsysopt.serving.space",
    "Objective": "mlsysopt.serving.objective",
    "SCORE_CAP": "mlsysopt.serving.objective",
    # backends: the real engine and its simulator
    "Backend": "mlsysopt.serving.backend",
    "Measurement": "mlsysopt.serving.backend",
    "Engine": "mlsysopt.serving.engine",
    "ServedModel": "mlsysopt.serving.model",
    "export_zoo_onnx": "mlsysopt.serving.model",
    "SimulatedEngine": "mlsysopt.serving.simulator",
    "ServiceProfile": "mlsysopt.serving.profile",
    "ServiceSample": "mlsysopt.serving.profile",
    "fit_profile": "mlsysopt.serving.profile",
    "measure_samples": "mlsysopt.serving.profile",
    "poisson_arrivals": "mlsysopt.serving.loadgen",
    "workload_arrivals": "mlsysopt.serving.loadgen",
    # tuners
    "Tuner": "mlsysopt.serving.tuners",
    "Exploration": "mlsysopt.serving.tuners",
    "RRL": "mlsysopt.serving.tuners",
    "RRLConfig": "mlsysopt.serving.tuners",
    "Default": "mlsysopt.serving.tuners",
    "Exhaustive": "mlsysopt.serving.tuners",
    "RandomSearch": "mlsysopt.serving.tuners",
    "OptunaTPE": "mlsysopt.serving.tuners",
    "OptunaGP": "mlsysopt.serving.tuners",
    "Bandit": "mlsysopt.serving.tuners",
    "HillClimb": "mlsysopt.serving.tuners",
    "TUNERS": "mlsysopt.serving.tuners",
    "get_tuner": "mlsysopt.serving.tuners",
    # the tuning loop
    "tune": "mlsysopt.serving.tuning",
    "Step": "mlsysopt.serving.tuning",
    "TuneResult": "mlsysopt.serving.tuning",
    "evals_to_within": "mlsysopt.serving.tuning",
    # inputs, resumable runs, plots, jobs (what the CLI, the demo and the benchmark call)
    "resolve_model": "mlsysopt.serving.inputs",
    "resolve_profile": "mlsysopt.serving.inputs",
    "load_config": "mlsysopt.serving.inputs",
    "make_backend": "mlsysopt.serving.inputs",
    "build_space": "mlsysopt.serving.inputs",
    "tuning_space": "mlsysopt.serving.inputs",
    "ReplayBackend": "mlsysopt.serving.experiment",
    "run_tuning": "mlsysopt.serving.experiment",
    "heatmap_values": "mlsysopt.serving.experiment",
    "plot_tuning": "mlsysopt.serving.experiment",
    "measure_profile": "mlsysopt.serving.experiment",
    "ProfileJob": "mlsysopt.serving.jobs",
    "TuningJob": "mlsysopt.serving.jobs",
    "ServeJob": "mlsysopt.serving.jobs",
}

if TYPE_CHECKING:
    from mlsysopt.serving.backend import Backend, Measurement
    from mlsysopt.serving.engine import Engine
    from mlsysopt.serving.experiment import ReplayBackend, heatmap_values, measure_profile, plot_tuning, run_tuning
    from mlsysopt.serving.inputs import (
        build_space,
        load_config,
        make_backend,
        resolve_model,
        resolve_profile,
        tuning_space,
    )
    from mlsysopt.serving.jobs import ProfileJob, ServeJob, TuningJob
    from mlsysopt.serving.loadgen import poisson_arrivals, workload_arrivals
    from mlsysopt.serving.model import ServedModel, export_zoo_onnx
    from mlsysopt.serving.objective import SCORE_CAP, Objective
    from mlsysopt.serving.profile import ServiceProfile, ServiceSample, fit_profile, measure_samples
    from mlsysopt.serving.simulator import SimulatedEngine
    from mlsysopt.serving.space import KNOBS, Config, Space, Workload
    from mlsysopt.serving.tuners import (
        RRL,
        TUNERS,
        Bandit,
        Default,
        Exhaustive,
        Exploration,
        HillClimb,
        OptunaGP,
        OptunaTPE,
        RandomSearch,
        RRLConfig,
        Tuner,
        get_tuner,
    )
    from mlsysopt.serving.tuning import Step, TuneResult, evals_to_within, tune

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
