"""``--op-costs ORACLE``: a CPU device's per-op times from the latency oracle instead of FLOPs / speed.

The simulator runs task ``i`` on device ``d`` for ``compute[i] / speed[d] + overhead[d]``. A FLOP count says little
about a real op's time on a CPU (a depthwise convolution, a GRU step, a reshape), so for a graph read from an ONNX
file, :func:`with_op_costs` asks the oracle for every node's share of the model's predicted latency
(:meth:`~mlsysopt.costmodel.oracle.oracle.LatencyOracle.per_op_ms`, ONNX Runtime, one thread, batch 1) and rewrites
``compute`` so that the chosen CPU device runs each op for exactly that time; other devices keep their speed ratio
to it. The oracle's times hold the runtime's per-op overhead (it was measured), so that device's ``overhead`` is set
to 0. The whole model simulated on that one device then takes the oracle's predicted latency.

``--op-costs FILE.json`` names an op profile instead (:mod:`mlsysopt.graph.op_profile`, written by
``mlsysopt placement calibrate``): the CPU's per-op times as PyTorch eager runs them, from micro-kernels timed on
it, for any graph imported from PyTorch or ONNX.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlsysopt.costmodel.oracle.settings import Setting
from mlsysopt.errors import InvalidOption
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.op_profile import is_profile_path, load_profile, with_device_seconds, with_op_profile


def check_op_costs(op_costs: str | None, device: str | None) -> Any:
    """The oracle (or op profile) ``--op-costs`` names, loaded now (before any folder exists), or one line naming
    the option.

    Args:
        op_costs: ``builtin``, an oracle folder or an op-profile ``.json`` file (None with a ``device`` is refused).
        device: ``--op-costs-device``: a non-empty name, or None.

    Returns:
        Any: The loaded :class:`~mlsysopt.costmodel.oracle.oracle.LatencyOracle` or
        :class:`~mlsysopt.graph.op_profile.OpProfile`.

    Raises:
        InvalidOption: If ``device`` comes without ``op_costs``, either is empty, or the oracle cannot give per-op
            times.
        InvalidCheckpoint: If the oracle cannot be loaded.
    """
    # deferred: imports torch
    from mlsysopt.costmodel.oracle.api import load_oracle

    # deferred: imports torch
    from mlsysopt.costmodel.oracle.oracle import LatencyOracle

    if op_costs is None:
        raise InvalidOption("--op-costs-device names the CPU device of --op-costs: give --op-costs builtin too")
    if not str(op_costs).strip():
        raise InvalidOption("--op-costs is empty: give builtin, an oracle folder or an op profile (.json)")
    if device is not None and not str(device).strip():
        raise InvalidOption("--op-costs-device is empty: name a device of the cluster")
    if is_profile_path(op_costs):
        return load_profile(op_costs)
    oracle = load_oracle(op_costs)
    if not isinstance(oracle, LatencyOracle):
        raise InvalidOption(f"--op-costs {op_costs}: per-op times need a latency oracle ('builtin' or a "
                            "'costmodel latency-train' folder)")  # fmt: skip
    return oracle


def cpu_device(cluster: Any, device: str | None) -> int:
    """The device the oracle's times apply to: ``device`` by name, else the first whose name contains ``cpu``.

    Raises:
        InvalidOption: Naming ``--op-costs-device`` when there is no such device.
    """
    names = [str(n) for n in cluster.names]
    if device is not None:
        if device not in names:
            raise InvalidOption(f"--op-costs-device '{device}': no such device (devices: {', '.join(names)})")
        return names.index(device)
    for i, n in enumerate(names):
        if "cpu" in n.lower():
            return i
    raise InvalidOption(f"--op-costs: no device named like 'cpu' in the cluster ({', '.join(names)}): name the CPU "
                        "device the oracle's times are for with --op-costs-device")  # fmt: skip


def with_op_costs(graph: CompGraph, cluster: Any, oracle_name: str, device: str | None = None,
                  setting: Setting | None = None) -> tuple[CompGraph, Any, dict[str, Any]]:  # fmt: skip
    """``graph`` with ``compute`` rewritten from the oracle's per-op times on one CPU device, the cluster with that
    device's overhead 0, and what was done.

    Args:
        graph: A graph imported from an ONNX file (its nodes are the oracle's nodes, one to one).
        cluster: The devices (:class:`~mlsysopt.graph.cluster.DeviceCluster`).
        oracle_name: ``builtin``, an oracle folder or an op-profile ``.json`` file (then any PyTorch or ONNX graph).
        device: The CPU device's name (default: the first named like ``cpu``).
        setting: The setting predicted (default ONNX Runtime, 1 thread, sequential, batch 1).

    Returns:
        tuple[CompGraph, DeviceCluster, dict[str, Any]]: The new graph, the new cluster and ``{"op_costs", "device",
        "predicted_ms", "setting"}``.

    Raises:
        InvalidOption: If the graph is not an ONNX import, or the device cannot be found.
        InvalidCheckpoint: If the oracle cannot be loaded.
    """
    if is_profile_path(oracle_name):
        return _with_profile(graph, cluster, oracle_name, device)
    # deferred: imports torch
    from mlsysopt.costmodel.oracle.collect import read_onnx

    path = graph.meta.get("path")
    if graph.meta.get("source") != "onnx" or not path or not Path(str(path)).is_file():
        raise InvalidOption("--op-costs needs a graph read from an .onnx file (its nodes are what the oracle "
                            "predicts); export a PyTorch model first, e.g. torch.onnx.export")  # fmt: skip
    oracle = check_op_costs(oracle_name, device)
    d = cpu_device(cluster, device)
    ops, nodes, edges = read_onnx(Path(str(path)))
    if list(ops) != list(graph.ops):
        raise InvalidOption(f"--op-costs: {path} changed since it was read (its nodes differ)")
    s = setting or Setting("onnxruntime", 1, "seq", 1)
    ms = oracle.per_op_ms(ops, nodes, s, edges)
    note = {"op_costs": f"{oracle.run} on {cluster.names[d]} ({s.key})"}
    new, costed = with_device_seconds(graph, cluster, ms / 1e3, d, note)
    about = {"op_costs": str(oracle.run), "device": str(cluster.names[d]), "setting": s.key,
             "predicted_ms": float(ms.sum())}  # fmt: skip
    return new, costed, about


def _with_profile(graph: CompGraph, cluster: Any, path: str, device: str | None) -> tuple[CompGraph, Any, dict]:
    """:func:`with_op_costs` for an op-profile file."""
    profile = load_profile(path)
    d = cpu_device(cluster, device)
    new, costed, total = with_op_profile(graph, cluster, profile, d)
    m = profile.meta
    setting = f"op profile: {m.get('runtime', 'PyTorch')}, {m.get('threads', '?')} thread(s), measured {m.get('date')}"
    about = {"op_costs": str(path), "device": str(cluster.names[d]), "setting": setting, "predicted_ms": total * 1e3,
             "profile_device": m.get("device"), "profile_fit": m.get("fit")}  # fmt: skip
    return new, costed, about
