"""The op vocabulary: canonical op names with stable ids, extended per graph by ops a source adds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Canonical op vocabulary. Ids are stable; a graph whose source has other ops appends them after these.
DEFAULT_VOCAB: tuple[str, ...] = (
    "other",
    "input",
    "output",
    "constant",
    "task",
    "conv",
    "conv_transpose",
    "linear",
    "matmul",
    "attention",
    "embedding",
    "add",
    "sub",
    "mul",
    "div",
    "elementwise",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "hardswish",
    "softmax",
    "batch_norm",
    "layer_norm",
    "group_norm",
    "max_pool",
    "avg_pool",
    "adaptive_avg_pool",
    "reduce",
    "reshape",
    "transpose",
    "concat",
    "split",
    "slice",
    "dropout",
)


def build_vocab(ops: Sequence[str], base: Sequence[str] = DEFAULT_VOCAB) -> tuple[tuple[str, ...], np.ndarray]:
    """Map op names to ids over ``base`` extended (in first-seen order) by ops it lacks."""
    vocab = list(base)
    index = {op: i for i, op in enumerate(vocab)}
    ids = np.empty(len(ops), dtype=np.int32)
    for k, op in enumerate(ops):
        if op not in index:
            index[op] = len(vocab)
            vocab.append(op)
        ids[k] = index[op]
    return tuple(vocab), ids
