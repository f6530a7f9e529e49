"""Which parts of a PyTorch module PyTorch eager runs as a few kernels, carried into its ONNX file.

PyTorch runs an ``nn.TransformerEncoderLayer`` or an ``nn.MultiheadAttention`` as a handful of kernels: in
inference its fast path (``torch._transformer_encoder_layer_fwd``, ``torch._native_multi_head_attention``), else
``F.multi_head_attention_forward`` (one input projection, a batched matrix product, softmax, another, the output
projection). The ONNX export of the same module writes each layer out in ~130 nodes, most of them shape arithmetic
(``Shape``, ``Gather``, ``Unsqueeze``, ``Concat``, ``Reshape``) that PyTorch never runs. A cost model that prices
those nodes as the ops of a hand-written block puts a tiny ViT built from ``nn.TransformerEncoder`` at ~2x its
measured PyTorch latency (0.84 vs 0.40 ms here); the fast path itself is not what differs (off or on, the same
model times 0.41 vs 0.40 ms).

:func:`~mlsysopt.graph.importers.onnx_export.export_onnx` therefore writes the module paths of such modules into the
file's metadata (:data:`FUSED_KEY`, a JSON list) and :func:`fused_mask` marks every node whose scope name lies
inside one of them (the TorchScript exporter names a node ``/enc/layers.0/self_attn/MatMul`` after the modules it
ran in; a file from the dynamo exporter, mlsysopt's fallback, names nodes otherwise and gets none marked). Only the
latency oracle's PyTorch settings read the mark; ONNX Runtime runs the exported nodes as they are.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

#: The ONNX metadata key holding the module paths PyTorch eager runs as a few kernels (a JSON list of dotted paths).
FUSED_KEY = "mlsysopt.torch_fused_modules"
#: The module classes (``torch.nn`` names) PyTorch runs as a few kernels while their export spells out many ops.
FUSED_CLASSES = ("TransformerEncoderLayer", "MultiheadAttention")


def fused_modules(module: Any) -> list[str]:
    """Dotted paths (``named_modules`` names; ``""`` for ``module`` itself) of the submodules of a
    :data:`FUSED_CLASSES` class, outermost first; nothing inside a listed path is listed again.

    Args:
        module: A ``torch.nn.Module``.

    Returns:
        list[str]: E.g. ``["enc.layers.0", "enc.layers.1"]``; empty when it holds none.
    """
    from torch import nn  # deferred: torch loads only for a PyTorch module

    kinds = tuple(getattr(nn, name) for name in FUSED_CLASSES)
    out: list[str] = []
    for name, m in module.named_modules():
        inside = any(p == "" or name.startswith(p + ".") for p in out)
        if not inside and isinstance(m, kinds):
            out.append(name)
    return out


def fused_mask(model: Any) -> np.ndarray:
    """One flag per node of an ONNX ``model``: whether it lies inside a module of :func:`fused_modules`.

    Args:
        model: An ``onnx.ModelProto`` (its metadata written by
            :func:`~mlsysopt.graph.importers.onnx_export.export_onnx`; a file without it has no flagged node).

    Returns:
        np.ndarray: ``(len(model.graph.node),)`` bool.
    """
    meta = {p.key: p.value for p in model.metadata_props}
    try:
        paths = [str(p) for p in json.loads(meta.get(FUSED_KEY, "[]"))]
    except (ValueError, TypeError):  # a foreign value under the key: nothing is flagged
        paths = []
    prefixes = tuple("." + p + "." if p else "." for p in paths)
    mask = np.zeros(len(model.graph.node), bool)
    if prefixes:
        for k, node in enumerate(model.graph.node):
            mask[k] = node.name.startswith("/") and node.name.replace("/", ".").startswith(prefixes)
    return mask
