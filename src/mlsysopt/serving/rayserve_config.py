"""A configuration as Ray Serve deploys it: deployment options, and the config file ``serve run``/``serve deploy`` read.

One mapping serves both the engine that measures (:class:`~mlsysopt.serving.rayserve.RayServeEngine`) and the
file a tune writes, so the tuned deployment is the measured one:

========================  =========================================================================
mlsysopt knob             Ray Serve
========================  =========================================================================
``instances``             ``num_replicas``
``max_batch``             ``user_config.max_batch_size`` (``@serve.batch``, counted in rows)
``batch_timeout_ms``      ``user_config.batch_wait_timeout_s`` (seconds)
``intra_threads``         ``user_config.intra_op_num_threads`` (ONNX Runtime session of a replica)
``inter_threads``         ``user_config.inter_op_num_threads``
``execution_mode``        ``user_config.execution_mode`` (``ORT_SEQUENTIAL`` / ``ORT_PARALLEL``)
``max_ongoing``           ``max_ongoing_requests``; not set (a space without the knob, a result written before it
                          was one): max(Ray Serve's default 5, 2 x max batch), so that a replica admits enough
                          requests to fill a batch while one runs (:attr:`~mlsysopt.serving.space.Config.ongoing`)
(threads per instance)    ``ray_actor_options.num_cpus``
========================  =========================================================================

Ray Serve applies a new ``max_ongoing_requests`` without restarting a replica (its ``DeploymentConfig`` marks the
field ``NeedsActorReconfigure``, as ``user_config``): only ``num_cpus`` restarts replicas. A config file whose
``max_ongoing_requests`` is the not-set rule's value reads back as "not set" (a file without the field: Ray Serve's
default 5).

The application is deployed with Ray Serve's per-request access log off (``logging_config``), as a latency-bound
service would run it; the engine that measures and the file a tune writes deploy it the same way. "Ray Serve's
default" in a verdict is one replica, no batching and ONNX Runtime's default threads (intra-op = the cores).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.space import SERVE_DEFAULT_ONGOING, Config

APP_NAME = "mlsysopt"
DEPLOYMENT = "OnnxModel"
APP_MODULE = "mlsysopt_serve_app"  # the copy of :mod:`mlsysopt.serving.rayserve_app` next to the config file
CONFIG_FILE = "serve_config.yaml"
_MODES = ("ORT_SEQUENTIAL", "ORT_PARALLEL")


def deployment_options(config: Config) -> dict[str, Any]:
    """The options of the ``OnnxModel`` deployment that serve ``config`` (see the module's table).

    Args:
        config: The configuration.

    Returns:
        dict[str, Any]: ``num_replicas``, ``max_ongoing_requests``, ``ray_actor_options`` and ``user_config``.
    """
    return {
        "num_replicas": int(config.instances),
        "max_ongoing_requests": int(config.ongoing),
        "ray_actor_options": {"num_cpus": float(config.threads_per_instance)},
        "user_config": {
            "max_batch_size": int(config.max_batch),
            "batch_wait_timeout_s": float(config.batch_timeout_ms) / 1000.0,
            "intra_op_num_threads": int(config.intra_threads),
            "inter_op_num_threads": int(config.inter_threads),
            "execution_mode": _MODES[int(config.execution_mode)],
        },
    }


def config_from_options(options: dict[str, Any], where: str) -> Config:
    """The configuration a deployment's options (as :func:`deployment_options` writes them) serve.

    Args:
        options: One entry of a config file's ``deployments`` list.
        where: Where the options come from, for errors.

    Returns:
        Config: The validated configuration.

    Raises:
        InvalidSpace: For a missing or bad field.
    """
    try:
        user = options["user_config"]
        mode = _MODES.index(str(user["execution_mode"]))
        knobs = {
            "instances": options["num_replicas"],
            "max_batch": user["max_batch_size"],
            "batch_timeout_ms": float(user["batch_wait_timeout_s"]) * 1000.0,
            "intra_threads": user["intra_op_num_threads"],
            "inter_threads": user["inter_op_num_threads"],
            "execution_mode": mode,
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidSpace(f"{where}: not a deployment mlsysopt wrote (missing or bad {exc})") from None
    config = Config.from_dict(knobs, where=where)
    # a file without the field deploys with Ray Serve's default
    ongoing = options.get("max_ongoing_requests", SERVE_DEFAULT_ONGOING)
    tuned = Config.from_dict({**knobs, "max_ongoing": ongoing}, where=where)
    return config if tuned.max_ongoing == config.ongoing else tuned


def model_inputs(model: Any) -> list[list[Any]]:
    """``[[name, dtype, per-row shape], ...]`` of a :class:`~mlsysopt.serving.model.ServedModel`, in input order."""
    return [[n, model.dtypes[n].str, list(model.sample_shapes[n])] for n in model.input_names]


def serve_config(
    config: Config, model_file: str, inputs: list[list[Any]], port: int = 8000, module: str = APP_MODULE
) -> dict[str, Any]:
    """The Ray Serve config file (``serve run`` / ``serve deploy`` format) that deploys ``config``.

    The engine that measures deploys this same dict (with ``module`` the installed
    :mod:`mlsysopt.serving.rayserve_app`), as ``serve run`` does with the file.

    Args:
        config: The configuration.
        model_file: Path of the ``.onnx`` file as the replicas will read it.
        inputs: The model's inputs (:func:`model_inputs`).
        port: HTTP port of Ray Serve's proxy (on 127.0.0.1).
        module: The module of the application builder (the copy next to the file by default).

    Returns:
        dict[str, Any]: The config, ready for YAML.
    """
    return {
        "proxy_location": "HeadOnly",
        "http_options": {"host": "127.0.0.1", "port": int(port)},
        "applications": [
            {
                "name": APP_NAME,
                "route_prefix": "/",
                "import_path": f"{module}:app_builder",
                "args": {"model": model_file, "inputs": inputs},
                # a line per request in the proxy's and the replica's logs costs CPU the model needs
                "logging_config": {"enable_access_log": False},
                "deployments": [{"name": DEPLOYMENT, **deployment_options(config)}],
            }
        ],
    }


def write_deployment(config: Config, model_path: Path, inputs: list[list[Any]], folder: Path) -> list[str]:
    """Write ``folder``: ``serve_config.yaml``, the application module it imports, and the model.

    ``cd folder && serve run serve_config.yaml`` serves it (``serve run`` puts the folder on the import path).

    Args:
        config: The configuration.
        model_path: The ``.onnx`` file served (copied into ``folder``).
        inputs: The model's inputs (:func:`model_inputs`).
        folder: Folder to write (created).

    Returns:
        list[str]: The files written, relative to ``folder``'s parent.
    """
    import yaml  # deferred: yaml loads only when a deployment is written

    folder.mkdir(parents=True, exist_ok=True)
    model_name = "model.onnx"
    shutil.copyfile(model_path, folder / model_name)
    # the sibling source file, copied as is (importing it would import Ray Serve, which writing a file does not need)
    shutil.copyfile(Path(__file__).with_name("rayserve_app.py"), folder / f"{APP_MODULE}.py")
    text = yaml.safe_dump(serve_config(config, model_name, inputs), sort_keys=False)
    header = "# Ray Serve config written by `mlsysopt serving tune`: cd here and `serve run serve_config.yaml`\n"
    (folder / CONFIG_FILE).write_text(header + text)
    return [f"{folder.name}/{f}" for f in (CONFIG_FILE, f"{APP_MODULE}.py", model_name)]


def load_serve_config(path: Path) -> Config:
    """The configuration a ``serve_config.yaml`` written by :func:`write_deployment` deploys.

    Raises:
        InvalidSpace: If the file cannot be read or is not one mlsysopt wrote.
    """
    import yaml  # deferred: yaml loads only when a serve config is read

    try:
        data = yaml.safe_load(path.read_text())
        deployments = data["applications"][0]["deployments"]
        options = next(d for d in deployments if d.get("name") == DEPLOYMENT)
    except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError, StopIteration) as exc:
        raise InvalidSpace(f"--config {path}: not a Ray Serve config mlsysopt wrote ({type(exc).__name__})") from None
    return config_from_options(options, f"--config {path}")
