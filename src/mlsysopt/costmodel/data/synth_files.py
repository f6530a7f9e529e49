"""Writers of SYNTHETIC TpuGraphs-like datasets: ``{train,valid,test}/*.npz`` folders in the published layout.

The graphs themselves come from :mod:`mlsysopt.costmodel.data.synthetic`; here each one is drawn from its own
seed (seed, split, index) and written atomically, so a folder is deterministic and safe to interrupt.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from mlsysopt.costmodel.data.malnet_synthetic import draw_size
from mlsysopt.costmodel.data.realistic import realistic_layout_graph
from mlsysopt.costmodel.data.synthetic import synth_layout_graph
from mlsysopt.costmodel.data.synthetic_tile import synth_tile_graph
from mlsysopt.costmodel.data.tpugraphs import save_npz
from mlsysopt.errors import InvalidOption


def _counts(num_graphs: int | Mapping[str, int] | None, default: Mapping[str, int]) -> dict[str, int]:
    if num_graphs is None:
        return dict(default)
    if isinstance(num_graphs, int):
        return {"train": num_graphs, "valid": max(1, num_graphs // 4), "test": max(1, num_graphs // 4)}
    out = {str(k): int(v) for k, v in num_graphs.items()}
    if any(v < 0 for v in out.values()):
        raise InvalidOption(f"graph counts must be >= 0, got {out}")
    return out


def _write_split_graphs(
    out_dir: str | Path,
    kind: str,
    make: Callable[[int, int, np.random.Generator], dict],
    num_graphs: int | Mapping[str, int] | None,
    nodes: int | tuple[int, int],
    configs: int | tuple[int, int],
    seed: int,
    default: Mapping[str, int],
) -> dict[str, list[Path]]:
    written: dict[str, list[Path]] = {}
    for split, count in _counts(num_graphs, default).items():
        written[split] = []
        for i in range(count):
            rng = np.random.default_rng([seed, zlib.crc32(split.encode()), i])
            n = draw_size(nodes, rng, "nodes")
            c = configs if isinstance(configs, int) else draw_size(configs, rng, "configs")
            if c < 1:
                raise InvalidOption(f"configs must be >= 1, got {configs}")
            path = Path(out_dir) / split / f"synthetic_{kind}_{split}_{i:04d}.npz"
            written[split].append(save_npz(path, make(n, c, rng)))
    return written


def synth_layout(
    out_dir: str | Path,
    num_graphs: int | Mapping[str, int] | None = None,
    nodes: int | tuple[int, int] = (1000, 5000),
    configs: int | tuple[int, int] = 64,
    seed: int = 0,
    profile: str = "simple",
) -> dict[str, list[Path]]:
    """Write SYNTHETIC layout graphs as ``out_dir/{split}/synthetic_layout_{split}_NNNN.npz``; deterministic by seed.

    ``num_graphs``: {split: count} (default train 20, valid 5, test 5) or an int n (train n, valid/test n // 4).
    Sizes are log-uniform in ``nodes``; each graph depends only on (seed, split, index). ``profile``: ``simple``
    (:mod:`~mlsysopt.costmodel.data.synthetic`) or ``realistic`` (:mod:`~mlsysopt.costmodel.data.realistic`).

    Args:
        out_dir: Output folder.
        num_graphs: Graphs per split, or an int n (train n, valid/test n // 4); None: 20/5/5.
        nodes: Node count, or a ``(lo, hi)`` range drawn log-uniformly.
        configs: Configurations per graph, or a ``(lo, hi)`` range; >= 1.
        seed: Seed (each graph depends only on seed, split and index).
        profile: ``"simple"`` or ``"realistic"`` runtimes.

    Returns:
        dict[str, list[Path]]: Written files per split.

    Raises:
        InvalidOption: For an unknown profile or bad counts or sizes.
    """
    make = {"simple": synth_layout_graph, "realistic": realistic_layout_graph}.get(profile)
    if make is None:
        raise InvalidOption(f"unknown layout profile '{profile}' (choose from: realistic, simple)")
    return _write_split_graphs(out_dir, "layout", make, num_graphs, nodes, configs, seed,
                               {"train": 20, "valid": 5, "test": 5})  # fmt: skip


def synth_tile(
    out_dir: str | Path,
    num_graphs: int | Mapping[str, int] | None = None,
    nodes: int | tuple[int, int] = (10, 200),
    configs: int | tuple[int, int] = (16, 128),
    seed: int = 0,
) -> dict[str, list[Path]]:
    """Write SYNTHETIC tile kernels as ``out_dir/{split}/synthetic_tile_{split}_NNNN.npz`` (as :func:`synth_layout`).

    Args:
        out_dir: Output folder.
        num_graphs: Graphs per split, or an int n (train n, valid/test n // 4); None: 40/10/10.
        nodes: Node count, or a ``(lo, hi)`` range drawn log-uniformly.
        configs: Configurations per kernel, or a ``(lo, hi)`` range; >= 1.
        seed: Seed (each kernel depends only on seed, split and index).

    Returns:
        dict[str, list[Path]]: Written files per split.

    Raises:
        InvalidOption: For bad counts or sizes.
    """
    return _write_split_graphs(out_dir, "tile", synth_tile_graph, num_graphs, nodes, configs, seed,
                               {"train": 40, "valid": 10, "test": 10})  # fmt: skip
