"""One entry point for cost-model graphs on disk: a data root and a split, a split folder, or one file."""

from __future__ import annotations

from pathlib import Path

from mlsysopt.costmodel.data.malnet import load_malnet_graph
from mlsysopt.costmodel.data.real import resolve_data
from mlsysopt.costmodel.data.record import GraphDataset, InMemoryDataset
from mlsysopt.costmodel.data.table import TableDataset, find_table
from mlsysopt.costmodel.data.tpugraphs import TpuGraphsDataset, load_layout_npz, load_tile_npz, npz_task, open_dataset
from mlsysopt.errors import InvalidDataFile, MissingSplit


def load_dataset(path: str | Path, split: str = "train") -> GraphDataset:
    """The graphs at ``path``: a data root's ``split``, a folder of TpuGraphs ``.npz`` files, or one file.

    A data root is TpuGraphs (``{train,valid,test}/*.npz``), MalNet (``split_info/{split}.txt``) or a runtime table
    (``runtimes.csv`` / ``runtimes.parquet`` and ``graphs/``, see :mod:`~mlsysopt.costmodel.data.table`);
    ``real:cpu`` is the shipped real collection (:mod:`~mlsysopt.costmodel.data.real`). One
    ``.npz`` is read as layout or tile by its keys; one ``.edgelist`` is a MalNet graph of unknown class.
    Graphs are read lazily (one at a time) except a single file, which is read and validated here.

    Args:
        path: A data root, a split folder of ``.npz`` files, one ``.npz`` / ``.edgelist`` / table file, or
            ``real:cpu``.
        split: Split to read from a data root: ``"train"``, ``"valid"`` or ``"test"``.

    Returns:
        GraphDataset: The graphs (an in-memory dataset of one record for a single graph file).

    Raises:
        MissingSplit: ``path`` does not exist, or a data root has no such split.
        InvalidDataFile: a file or split file is malformed (names the file and the key or line).
    """
    path = resolve_data(path)
    if not path.exists():
        raise MissingSplit(f"{path}: no such file or folder")
    if find_table(path) is not None:
        return TableDataset(path, split)
    if path.is_file():
        if path.suffix == ".edgelist":
            return InMemoryDataset([load_malnet_graph(path, label=None)])
        if path.suffix == ".npz":
            record = load_layout_npz(path) if npz_task(path) == "layout" else load_tile_npz(path)
            return InMemoryDataset([record])
        raise InvalidDataFile(f"{path}: expected a .npz, .edgelist, .csv or .parquet file, or a data folder")
    if not (path / split).is_dir() and not (path / "split_info").is_dir() and any(path.glob("*.npz")):
        return TpuGraphsDataset(path.parent, path.name)  # a split folder itself, e.g. data/layout/test
    return open_dataset(path, split)
