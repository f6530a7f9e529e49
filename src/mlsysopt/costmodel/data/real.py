"""The real cost-model dataset shipped with mlsysopt: ``costmodel collect``'s runtimes measured on its CPU.

``real_root()`` is the data root (``{train,valid,test}/*.npz`` in the TpuGraphs layout and ``collection.json``,
which names the machine); ``--data real:cpu`` anywhere a data root goes means it. The graphs are PyTorch CNNs
(the zoo, NAS-space cells, generated VGG / ResNet / MobileNet / Inception-like nets); a configuration is the
memory format of every convolution plus PyTorch's thread count; runtimes are the fastest of repeated timings,
with their rounds, medians and intervals (see :mod:`mlsysopt.costmodel.collection.job`). Size-bounded (a few MB)
so that the tests and the benchmark run offline; re-measure on your own machine with ``mlsysopt costmodel collect``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlsysopt.errors import InvalidDataFile, MissingSplit
from mlsysopt.io import read_json

#: ``--data`` names of shipped collections. ``real:cpu-layout`` names this layout-ranking set explicitly: the
#: latency oracle's ``real:cpu`` is the latency collection (:mod:`mlsysopt.costmodel.oracle.dataset`), a table of
#: models x settings that GST's layout format does not hold; ``costmodel train --data real:cpu`` still reads this one.
REAL_SETS: dict[str, str] = {"real:cpu": "real_cpu", "real:cpu-layout": "real_cpu"}


def real_root(name: str = "real:cpu") -> Path:
    """The folder of the shipped collection ``name`` (MissingSplit when this installation has none)."""
    if name not in REAL_SETS:
        raise MissingSplit(f"unknown shipped dataset '{name}' (have: {', '.join(REAL_SETS)})")
    root = Path(__file__).parent / REAL_SETS[name]
    if not (root / "collection.json").is_file():
        raise MissingSplit(f"{name}: this installation has no shipped collection at {root}")
    return root


def resolve_data(path: str | Path) -> Path:
    """``path`` itself, or the shipped root when it names one (``real:cpu``)."""
    return real_root(str(path)) if str(path) in REAL_SETS else Path(path)


def manifest(name: str = "real:cpu") -> dict[str, Any]:
    """The shipped collection's ``collection.json`` (machine, date, settings, every graph)."""

    return dict(read_json(real_root(name) / "collection.json", InvalidDataFile))
