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
    "PENALTY": "mlsysopt.serving.objective",
    # measurements you can trust: stable windows, intervals, noise, confirmation, throughput under an SLO
    "StableBackend": "mlsysopt.serving.windows",
    "merge": "mlsysopt.serving.windows",
    "mean_ci": "mlsysopt.serving.stats",
    "median_ci": "mlsysopt.serving.stats",
    "measure_noise": "mlsysopt.serving.confirmation",
    "confirm": "mlsysopt.serving.confirmation",
    "Confirmation": "mlsysopt.serving.confirmation",
    "CapacityBackend": "mlsysopt.serving.capacity",
    "LoadGenerator": "mlsysopt.serving.loadgen",
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
    "calibrate_dispatch": "mlsysopt.serving.profiling",
    # a model made servable, and a tuned configuration usable outside mlsysopt
    "export_served": "mlsysopt.serving.export",
    "ort_session_json": "mlsysopt.serving.deploy",
    "session_options_from_json": "mlsysopt.serving.deploy",
    "triton_config": "mlsysopt.serving.deploy",
    "parse_triton_config": "mlsysopt.serving.deploy",
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
    "default_tuner": "mlsysopt.serving.tuner_rule",
    "budget_class": "mlsysopt.serving.tuner_rule",
    # the tuning loop
    "tune": "mlsysopt.serving.tuning",
    "Step": "mlsysopt.serving.tuning",
    "RateAnswer": "mlsysopt.serving.tuning",
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
    "measure_profile": "mlsysopt.serving.profiling",
    "ProfileJob": "mlsysopt.serving.jobs",
    "TuningJob": "mlsysopt.serving.tuning_job",
    "ServeJob": "mlsysopt.serving.jobs",
    # simulator studies on any executor
    "run_study": "mlsysopt.serving.study",
    "exhaustive_tables": "mlsysopt.serving.study",
    "StudyJob": "mlsysopt.serving.study_job",
}

if TYPE_CHECKING:
    from mlsysopt.serving.backend import Backend, Measurement
    from mlsysopt.serving.capacity import CapacityBackend
    from mlsysopt.serving.confirmation import Confirmation, confirm, measure_noise
    from mlsysopt.serving.deploy import ort_session_json, parse_triton_config, session_options_from_json, triton_config
    from mlsysopt.serving.engine import Engine
    from mlsysopt.serving.experiment import ReplayBackend, heatmap_values, plot_tuning, run_tuning
    from mlsysopt.serving.export import export_served
    from mlsysopt.serving.inputs import (
        build_space,
        load_config,
        make_backend,
        resolve_model,
        resolve_profile,
        tuning_space,
    )
    from mlsysopt.serving.jobs import ProfileJob, ServeJob
    from mlsysopt.serving.loadgen import LoadGenerator, poisson_arrivals, workload_arrivals
    from mlsysopt.serving.model import ServedModel, export_zoo_onnx
    from mlsysopt.serving.objective import PENALTY, SCORE_CAP, Objective
    from mlsysopt.serving.profile import ServiceProfile, ServiceSample, fit_profile, measure_samples
    from mlsysopt.serving.profiling import calibrate_dispatch, measure_profile
    from mlsysopt.serving.simulator import SimulatedEngine
    from mlsysopt.serving.space import KNOBS, Config, Space, Workload
    from mlsysopt.serving.stats import mean_ci, median_ci
    from mlsysopt.serving.study import exhaustive_tables, run_study
    from mlsysopt.serving.study_job import StudyJob
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
    from mlsysopt.serving.tuning import RateAnswer, Step, TuneResult, evals_to_within, tune
    from mlsysopt.serving.tuning_job import TuningJob
    from mlsysopt.serving.windows import StableBackend, merge

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
