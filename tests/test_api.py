"""The public Python API: every documented name imports from its package root, and roots import lazily."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

#: Names each package root must export (the architecture issue's list, and more).
REQUIRED: dict[str, tuple[str, ...]] = {
    "mlsysopt.graph": (
        "CompGraph",
        "DeviceCluster",
        "load_graph",
        "simulate",
        "Simulator",
        "cp_min",
        "slr",
        "layered_dag",
        "random_cluster",
        "longest_path",
        "longest_paths",
        "build_csr",
        "longest_paths_csr",
        "PlacementProblem",
        "load_problem",
        "load_placement",
        "load_cluster",
        "preset_cluster",
        "PRESETS",
        "units_of",
        "implausible",
        "resolve_source",
    ),
    "mlsysopt.placement": (
        "GiPH",
        "HEFT",
        "RandomSearch",
        "Annealing",
        "EFTGreedy",
        "PlacementProblem",
        "compare",
        "adapt",
        "train",
        "Placer",
        "PlacementResult",
        "TrainConfig",
        "PlacementEnv",
        "GiPHPolicy",
        "default_budget",
        "METHODS",
        "run_method",
        "change_cluster",
        "carry_over",
        "adaptivity",
        "get_baseline",
        "device_map",
        "apply_device_map",
        "node_owners",
        "run_search",
        "run_adapt",
    ),
    "mlsysopt.serving": (
        "RRL",
        "Engine",
        "tune",
        "Space",
        "Workload",
        "Objective",
        "Config",
        "Measurement",
        "Backend",
        "SimulatedEngine",
        "ServiceProfile",
        "ServedModel",
        "Tuner",
        "Default",
        "Exhaustive",
        "RandomSearch",
        "OptunaTPE",
        "OptunaGP",
        "Bandit",
        "HillClimb",
        "get_tuner",
        "TUNERS",
        "run_tuning",
        "make_backend",
        "resolve_profile",
        "TuningJob",
        "StableBackend",
        "confirm",
        "measure_noise",
        "CapacityBackend",
        "LoadGenerator",
        "export_served",
        "ort_session_json",
        "triton_config",
        "parse_triton_config",
        "run_study",
        "StudyJob",
    ),
    "mlsysopt.serving.tuners": ("RRL", "RRLConfig", "Tuner", "OptunaTPE", "OptunaGP", "TUNERS", "get_tuner"),
    "mlsysopt.costmodel": (
        "Trainer",
        "TrainConfig",
        "ModelConfig",
        "load_dataset",
        "train",
        "evaluate",
        "predict",
        "synth",
        "MODES",
        "opa",
        "kendall_tau",
        "slowdown_at_k",
        "ranking_metrics",
        "classification_metrics",
        "Segmenter",
        "contiguous_segments",
        "metis_segments",
        "GraphRecord",
        "InMemoryDataset",
        "TpuGraphsDataset",
        "MalNetDataset",
        "load_layout_npz",
        "load_malnet_graph",
        "synth_layout",
        "synth_malnet",
        "synth_layout_graph",
    ),
    "mlsysopt.io": ("RunDir", "read_json", "write_json_atomic", "to_jsonable", "save_torch_atomic", "load_torch"),
    "mlsysopt.store": (
        "Store",
        "TrialRecord",
        "record_trial",
        "storage",
        "use_storage",
        "parse_storage",
        "resolve_storage",
        "StudyHandle",
        "StudyWriter",
        "RunStore",
        "SCHEMA_VERSION",
    ),
    "mlsysopt.nas": (
        "EPNAS",
        "EPNASConfig",
        "run_search",
        "Constraints",
        "Constraint",
        "get_method",
        "get_space",
        "METHOD_NAMES",
        "Searcher",
        "SearcherConfig",
        "SearchResult",
        "RandomSearch",
        "RegularizedEvolution",
        "EvolutionConfig",
        "ReinforceSearch",
        "ReinforceConfig",
        "PNAS",
        "PNASConfig",
        "OptunaTPE",
        "TPEConfig",
        "Stages",
        "SearchSpace",
        "Arch",
        "Evaluation",
        "NasBenchGraphSpace",
        "CnnSpace",
        "SearchOptions",
        "prepare_search",
        "prepare_export",
        "load_exported_cnn",
        "model_from_architecture",
        "space_catalog",
        "check_search_size",
        "parse_method_knobs",
        "regret",
        "pareto_points",
        "table_background",
    ),
}


@pytest.mark.parametrize(("package", "name"), [(p, n) for p, names in REQUIRED.items() for n in names])
def test_name_imports_from_the_package_root(package: str, name: str) -> None:
    module = importlib.import_module(package)
    assert getattr(module, name) is not None
    assert name in module.__all__
    assert name in dir(module)


@pytest.mark.parametrize("package", sorted(REQUIRED))
def test_unknown_names_raise_attribute_error(package: str) -> None:
    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        _ = module.NoSuchThing


@pytest.mark.parametrize("package", sorted(REQUIRED))
def test_package_roots_import_lazily(package: str) -> None:
    """Importing a package root loads none of the heavy libraries (torch, numba, onnxruntime, matplotlib)."""
    code = (
        f"import sys, {package}\n"
        "heavy = [m for m in ('torch', 'numba', 'onnxruntime', 'matplotlib', 'optuna') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"importing {package} loaded {out}"


@pytest.mark.parametrize("package", sorted(REQUIRED))
def test_no_public_name_is_also_a_submodule(package: str) -> None:
    """``pkg.simulate`` must stay the function even after ``pkg/simulate.py`` is imported by someone."""
    import pkgutil

    module = importlib.import_module(package)
    submodules = {m.name for m in pkgutil.iter_modules(module.__path__)}
    assert not submodules & set(module.__all__)
