"""A tuned configuration usable outside mlsysopt: ONNX Runtime session options (JSON) and a Triton config fragment.

* ``ort_session_options.json`` — the ``onnxruntime.SessionOptions`` fields of one instance (intra/inter-op
  threads, execution mode, optimization level, session config entries) plus the request-level knobs under
  ``serving`` (instances, max batch, batch timeout), which a serving front end (Triton, Ray Serve) sets.
  :func:`session_options_from_json` loads it into a real ``SessionOptions``.
* ``config.pbtxt`` — a Triton Inference Server model configuration fragment for the ``onnxruntime`` backend:
  ``max_batch_size``, ``instance_group`` (count, ``KIND_CPU``), ``dynamic_batching``
  (``max_queue_delay_microseconds``) and the backend's thread parameters (``intra_op_thread_count``,
  ``inter_op_thread_count``, ``execution_mode``). :func:`parse_triton_config` parses it with protobuf's text
  format against the fields of Triton's ``model_config.proto`` it uses (a faithful subset, field names and types
  as in Triton), so a typo or a wrong type fails as it would in Triton.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlsysopt.errors import InvalidSpace
from mlsysopt.serving.space import Config

if TYPE_CHECKING:
    import onnxruntime as ort

#: what every session mlsysopt serves with sets besides the thread counts (several sessions share the cores, so
#: spinning idle pool threads would steal them from the busy ones)
SESSION_CONFIG_ENTRIES = {"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"}
_MODES = ("ORT_SEQUENTIAL", "ORT_PARALLEL")


def session_options(intra: int, inter: int, execution_mode: int) -> ort.SessionOptions:
    """The ``onnxruntime.SessionOptions`` of one serving instance."""
    return session_options_from_json(ort_options(intra, inter, execution_mode))


def ort_options(intra: int, inter: int, execution_mode: int) -> dict[str, Any]:
    """The session options of one instance as a JSON-ready dict (ONNX Runtime's attribute names)."""
    return {
        "intra_op_num_threads": int(intra),
        "inter_op_num_threads": int(inter),
        "execution_mode": _MODES[int(execution_mode)],
        "graph_optimization_level": "ORT_ENABLE_ALL",
        "log_severity_level": 3,
        "session_config_entries": dict(SESSION_CONFIG_ENTRIES),
    }


def ort_session_json(config: Config) -> dict[str, Any]:
    """``ort_session_options.json`` of a tuned configuration: session options plus the request-level knobs.

    Args:
        config: The tuned configuration.

    Returns:
        dict[str, Any]: ONNX Runtime session option fields plus ``serving`` (``instances``, ``max_batch``,
        ``batch_timeout_ms``).
    """
    return {
        **ort_options(config.intra_threads, config.inter_threads, config.execution_mode),
        "serving": {
            "instances": config.instances,
            "max_batch": config.max_batch,
            "batch_timeout_ms": config.batch_timeout_ms,
        },
    }


def session_options_from_json(data: dict[str, Any]) -> ort.SessionOptions:
    """A real ``onnxruntime.SessionOptions`` from the dict :func:`ort_session_json` writes (``serving`` ignored).

    Args:
        data: A dict as written by :func:`ort_session_json`.

    Returns:
        ort.SessionOptions: The session options.

    Raises:
        InvalidSpace: If a field is missing or has a bad value.
    """
    import onnxruntime as ort  # deferred: onnxruntime loads only when session options are built

    opts = ort.SessionOptions()
    try:
        opts.intra_op_num_threads = int(data["intra_op_num_threads"])
        opts.inter_op_num_threads = int(data["inter_op_num_threads"])
        opts.execution_mode = getattr(ort.ExecutionMode, data["execution_mode"])
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, data["graph_optimization_level"])
        opts.log_severity_level = int(data.get("log_severity_level", 2))
        for key, value in data.get("session_config_entries", {}).items():
            opts.add_session_config_entry(str(key), str(value))
    except (KeyError, AttributeError, TypeError, ValueError) as exc:
        raise InvalidSpace(
            f"ONNX Runtime session options: bad or missing field ({type(exc).__name__}: {exc})"
        ) from None
    return opts


def triton_config(config: Config, name: str) -> str:
    """A Triton ``config.pbtxt`` for the ``onnxruntime`` backend serving ``name`` with ``config``.

    Args:
        config: The tuned configuration.
        name: Model name written in the config.

    Returns:
        str: The ``config.pbtxt`` text.
    """
    lines = [
        f'name: "{name}"',
        'backend: "onnxruntime"',
        f"max_batch_size: {config.max_batch}",
        "instance_group [",
        "  {",
        f"    count: {config.instances}",
        "    kind: KIND_CPU",
        "  }",
        "]",
    ]
    if config.max_batch > 1:
        delay_us = round(config.batch_timeout_ms * 1000)
        lines += ["dynamic_batching {", f"  max_queue_delay_microseconds: {delay_us}", "}"]
    params = {
        "intra_op_thread_count": config.intra_threads,
        "inter_op_thread_count": config.inter_threads,
        "execution_mode": config.execution_mode,
    }
    for key, value in params.items():
        lines.append(f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}')
    return "\n".join(lines) + "\n"


_PROTO_CLASS: Any = None


def _model_config_class() -> Any:
    """The ``inference.ModelConfig`` message class restricted to the fields :func:`triton_config` writes."""
    global _PROTO_CLASS
    if _PROTO_CLASS is not None:
        return _PROTO_CLASS
    # deferred: protobuf loads only for a Triton config.pbtxt (it would slow `mlsysopt --help`)
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="mlsysopt_triton_model_config.proto", package="inference")

    def message(name: str, fields: list[tuple[str, int, int, int, str]]) -> descriptor_pb2.DescriptorProto:
        msg = f.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            fld = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                fld.type_name = type_name
        return msg

    opt, rep = fdp.LABEL_OPTIONAL, fdp.LABEL_REPEATED
    group = message(
        "ModelInstanceGroup",
        [("name", 1, fdp.TYPE_STRING, opt, ""), ("kind", 4, fdp.TYPE_ENUM, opt, ".inference.ModelInstanceGroup.Kind"),
         ("count", 2, fdp.TYPE_INT32, opt, "")],
    )  # fmt: skip
    kind = group.enum_type.add(name="Kind")
    for i, k in enumerate(("KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL")):
        kind.value.add(name=k, number=i)
    message(
        "ModelDynamicBatching",
        [("preferred_batch_size", 1, fdp.TYPE_INT32, rep, ""),
         ("max_queue_delay_microseconds", 2, fdp.TYPE_UINT64, opt, "")],
    )  # fmt: skip
    message("ModelParameter", [("string_value", 1, fdp.TYPE_STRING, opt, "")])
    config = message(
        "ModelConfig",
        [("name", 1, fdp.TYPE_STRING, opt, ""), ("platform", 2, fdp.TYPE_STRING, opt, ""),
         ("backend", 17, fdp.TYPE_STRING, opt, ""), ("max_batch_size", 4, fdp.TYPE_INT32, opt, ""),
         ("instance_group", 7, fdp.TYPE_MESSAGE, rep, ".inference.ModelInstanceGroup"),
         ("dynamic_batching", 11, fdp.TYPE_MESSAGE, opt, ".inference.ModelDynamicBatching"),
         ("parameters", 14, fdp.TYPE_MESSAGE, rep, ".inference.ModelConfig.ParametersEntry")],
    )  # fmt: skip
    entry = config.nested_type.add(name="ParametersEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=fdp.TYPE_STRING, label=opt)
    entry.field.add(name="value", number=2, type=fdp.TYPE_MESSAGE, label=opt, type_name=".inference.ModelParameter")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    _PROTO_CLASS = message_factory.GetMessageClass(pool.FindMessageTypeByName("inference.ModelConfig"))
    return _PROTO_CLASS


def parse_triton_config(text: str) -> Any:
    """Parse a ``config.pbtxt`` with protobuf's text format (Triton's field names and types); errors name the line.

    Args:
        text: The ``config.pbtxt`` text.

    Returns:
        Any: The parsed ``inference.ModelConfig`` protobuf message.

    Raises:
        InvalidSpace: If the text does not parse (unknown field, wrong type).
    """
    from google.protobuf import text_format  # deferred: protobuf loads only for a Triton config.pbtxt

    msg = _model_config_class()()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as exc:
        raise InvalidSpace(f"config.pbtxt: {exc}") from None
    return msg


def config_from_ort_json(data: dict[str, Any], where: str) -> Config:
    """The configuration an ``ort_session_options.json`` (as :func:`ort_session_json` writes it) describes.

    Raises:
        InvalidSpace: For a missing or bad field.
    """
    session_options_from_json(data)  # the session options themselves must load
    try:
        serving = data["serving"]
        knobs = {
            "instances": serving["instances"],
            "max_batch": serving["max_batch"],
            "batch_timeout_ms": serving["batch_timeout_ms"],
            "intra_threads": data["intra_op_num_threads"],
            "inter_threads": data["inter_op_num_threads"],
            "execution_mode": _MODES.index(data["execution_mode"]),
        }
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidSpace(f"{where}: not session options mlsysopt wrote (missing or bad {exc})") from None
    return Config.from_dict(knobs, where=where)


def config_from_triton(text: str, where: str) -> Config:
    """The configuration a ``config.pbtxt`` (as :func:`triton_config` writes it) describes.

    Raises:
        InvalidSpace: If it does not parse or lacks a field mlsysopt writes.
    """
    try:
        msg = parse_triton_config(text)
    except InvalidSpace as exc:
        raise InvalidSpace(f"{where}: {exc}") from None
    params = {k: v.string_value for k, v in msg.parameters.items()}
    try:
        knobs = {
            "instances": msg.instance_group[0].count,
            "max_batch": max(1, msg.max_batch_size),
            "batch_timeout_ms": msg.dynamic_batching.max_queue_delay_microseconds / 1000.0,
            "intra_threads": int(params["intra_op_thread_count"]),
            "inter_threads": int(params["inter_op_thread_count"]),
            "execution_mode": int(params["execution_mode"]),
        }
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidSpace(f"{where}: not a Triton config mlsysopt wrote (missing or bad {exc})") from None
    return Config.from_dict(knobs, where=where)
