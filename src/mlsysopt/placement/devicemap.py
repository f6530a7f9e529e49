"""Placements usable outside mlsysopt: ``device_map.json`` for PyTorch graphs, and applying one to a module.

A graph imported from a PyTorch model (torch.fx) has one task per fx node, named like the node. Its device map
says where each node runs and where each submodule's weights live::

    {"format": "mlsysopt.device_map/1", "source": "zoo:cnn", "devices": ["dev0", "dev1", ...],
     "nodes":   {"conv1": {"device": "dev1", "module": "conv1"}, "add": {"device": "dev0", "module": "block0"}, ...},
     "modules": {"conv1": "dev1", "block0.conv": "dev0", ...},
     "shared_modules": {"act": ["dev0", "dev1"]}}

``nodes`` maps every fx node name to its device and to the qualified name of the module that owns it (the module
it calls, or the module whose ``forward`` it is part of; ``""`` is the model itself). ``modules`` maps every
submodule called by a node, and every module owning a parameter or buffer read by a node, to the device of its
first such node; a module called from several devices is listed in ``shared_modules`` (its weights live on the
first device; the others read them from there).

:func:`apply_device_map` moves a module's submodules to real torch devices (``{"dev0": "cuda:0", "dev1": "cpu"}``)
and returns an fx ``GraphModule`` that moves each node's inputs to its device, so the model runs split across
devices as placed. Without mlsysopt, ``model.get_submodule(name).to(devices[dev])`` for each ``modules`` entry
moves the weights the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import ImportFailed, InvalidPlacement

if TYPE_CHECKING:
    import torch
    from torch import fx, nn

    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.ir import CompGraph

FORMAT = "mlsysopt.device_map/1"


def node_owners(module: nn.Module) -> dict[str, dict[str, str | None]]:
    """Every fx node of ``module`` (traced as the importer traces it): ``{name: {"op", "module", "uses"}}``.

    ``module`` is the qualified name of the owning module (``""``: the model itself); ``uses`` the module whose
    weights the node reads (the called module, or the owner of a ``get_attr`` parameter/buffer), None if none.

    Args:
        module: The PyTorch model; it is traced with torch.fx (its code runs).

    Returns:
        fx node name -> ``{"op": fx op, "module": owning module, "uses": module whose weights it reads or None}``.
    """
    gm = _trace(module)
    owners: dict[str, dict[str, str | None]] = {}
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack") or {}
        owner = next(reversed(stack.values()))[0] if stack else ""
        uses = None
        if node.op == "call_module":
            owner = uses = str(node.target)
        elif node.op == "get_attr":
            uses = str(node.target).rpartition(".")[0]
        owners[node.name] = {"op": node.op, "module": owner, "uses": uses}
    return owners


def device_map(
    graph: CompGraph,
    cluster: DeviceCluster,
    placement: np.ndarray,
    owners: Mapping[str, Mapping[str, str | None]] | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    """The device map of ``placement`` (one device id per task) of a torch.fx graph.

    Args:
        graph, cluster, placement: the placed graph.
        owners: :func:`node_owners` of the model the graph was imported from; without it (e.g. a saved .npz), the
            map has the nodes' devices only (``modules`` empty, each node's ``module`` None).
        source: the source spec, recorded as is.
    """
    placement = np.asarray(placement, dtype=np.int64)
    if placement.shape != (graph.num_nodes,):
        raise InvalidPlacement(f"placement has shape {placement.shape}, the graph {graph.num_nodes} tasks")
    if owners is not None:
        missing = [n for n in graph.names if n not in owners]
        if missing or len(owners) != graph.num_nodes:
            what = f"node '{missing[0]}' is not in the model" if missing else "the model has other nodes"
            raise InvalidPlacement(f"the graph is not this model's fx graph ({what}): it cannot give a device map")
    nodes: dict[str, dict[str, Any]] = {}
    modules: dict[str, str] = {}
    called_on: dict[str, list[str]] = {}
    for name, d in zip(graph.names, placement.tolist(), strict=True):
        device = cluster.names[d]
        info = None if owners is None else owners[name]
        nodes[name] = {"device": device, "module": None if info is None else info["module"]}
        used = None if info is None else info["uses"]
        if used is not None:
            modules.setdefault(used, device)
            seen = called_on.setdefault(used, [])
            if device not in seen:
                seen.append(device)
    return {
        "format": FORMAT,
        "source": source,
        "graph": graph.meta.get("name"),
        "devices": list(cluster.names),
        "nodes": nodes,
        "modules": modules,
        "shared_modules": {m: devs for m, devs in called_on.items() if len(devs) > 1},
    }


def move(value: Any, device: torch.device) -> Any:
    """``value`` on ``device``: tensors are moved, tuples/lists/dicts of them element-wise, the rest kept."""
    import torch  # deferred: torch loads only for a PyTorch model's tensors

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(move(v, device) for v in value)
    if isinstance(value, dict):
        return {k: move(v, device) for k, v in value.items()}
    return value


def apply_device_map(
    module: nn.Module, dmap: Mapping[str, Any], devices: Mapping[str, str | torch.device]
) -> fx.GraphModule:
    """Move ``module``'s weights as ``dmap`` says and return a GraphModule that runs each node on its device.

    Args:
        module: the model the map was made for (its submodules are moved in place).
        dmap: a device map (:func:`device_map`, or ``device_map.json`` read back).
        devices: the torch device of every cluster device name the map uses, e.g. ``{"dev0": "cuda:0"}``.

    Returns:
        The traced model with a transfer of each input to its node's device; call it like ``module``.
    """
    import torch  # deferred: torch loads only for a PyTorch model
    from torch import fx  # deferred: torch loads only for a PyTorch model

    if dmap.get("format") != FORMAT:
        raise InvalidPlacement(f"not an mlsysopt device map (format {dmap.get('format')!r}, expected {FORMAT!r})")
    used = sorted({str(v["device"]) for v in dmap["nodes"].values()} | {str(v) for v in dmap["modules"].values()})
    missing = [d for d in used if d not in devices]
    if missing:
        raise InvalidPlacement(f"no torch device given for {', '.join(missing)} (the map uses {', '.join(used)})")
    target = {name: torch.device(devices[name]) for name in used}
    gm = _trace(module)
    names = [n.name for n in gm.graph.nodes]
    if set(names) != set(dmap["nodes"]):
        extra = sorted(set(names) ^ set(dmap["nodes"]))[:3]
        raise InvalidPlacement(f"the model's fx graph does not match the device map (differs in {', '.join(extra)})")
    for qualname, dev in dmap["modules"].items():
        _move_weights(gm, qualname, target[str(dev)])
    moved: dict[tuple[str, str], fx.Node] = {}
    for node in list(gm.graph.nodes):
        if node.op not in ("call_module", "call_function", "call_method"):
            continue
        dev = target[str(dmap["nodes"][node.name]["device"])]

        def to_device(arg: fx.Node, node: fx.Node = node, dev: torch.device = dev) -> fx.Node:
            key = (arg.name, str(dev))
            if key not in moved:
                with gm.graph.inserting_before(node):
                    moved[key] = gm.graph.call_function(move, (arg, dev))
            return moved[key]

        node.args = fx.node.map_arg(node.args, to_device)
        node.kwargs = fx.node.map_arg(node.kwargs, to_device)
    gm.graph.lint()
    gm.recompile()
    return gm


def _move_weights(gm: fx.GraphModule, qualname: str, device: torch.device) -> None:
    """Move the weights of submodule ``qualname``: all of a called (leaf) module, else only its own tensors."""
    try:
        sub = gm.get_submodule(qualname) if qualname else gm
    except AttributeError:
        raise InvalidPlacement(f"the device map names module '{qualname}', which the model does not have") from None
    called = any(n.op == "call_module" and n.target == qualname for n in gm.graph.nodes)
    if called:
        sub.to(device)
        return
    for _, param in sub.named_parameters(recurse=False):
        param.data = param.data.to(device)
    for name, buf in list(sub.named_buffers(recurse=False)):
        sub.register_buffer(name, buf.to(device))


def _trace(module: nn.Module) -> fx.GraphModule:

    try:
        from torch import fx  # deferred: torch loads only for a PyTorch model

        return fx.symbolic_trace(module)
    except Exception as exc:  # torch.fx raises many kinds; the importer gives the details
        raise ImportFailed(f"torch.fx cannot trace {type(module).__name__}: {exc}") from None
