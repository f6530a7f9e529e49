"""A grid of configurations for one model, with no runtimes: what ``costmodel predict --input MODEL --configs GRID``
ranks.

A model trained on a runtime table (:mod:`mlsysopt.costmodel.data.table`) ranks the configurations of a model
nobody measured: ``GRID`` is a CSV with one row per configuration and the table's knob columns (``NODE.KNOB`` or a
graph-level name such as ``threads``; an optional ``config`` id), and ``MODEL`` an ONNX file, a saved CompGraph
``.npz`` or a ``.py`` file whose ``model()`` returns ``(module, inputs)`` (``file.py:factory`` for another name).
Each knob keeps the configuration-feature slot it had in training (the run records them), so a grid may list a
subset of the training knobs in any order; a knob the training table did not have is refused.
"""

from __future__ import annotations

import csv
import tempfile
from collections.abc import Mapping
from pathlib import Path

from mlsysopt.costmodel.data.table import GRAPH_SUFFIXES, MAX_ROWS, PY_FACTORY, TableDataset
from mlsysopt.errors import InvalidDataFile, InvalidOption

#: Columns a grid may not have: it lists configurations of the one ``--input`` model, without times.
FORBIDDEN = ("graph", "runtime", "split")


def grid_dataset(model: str | Path, grid: str | Path, slots: Mapping[str, int] | None = None) -> TableDataset:
    """The configurations of ``grid`` on ``model`` as one layout record (runtimes unknown: 1.0 placeholders).

    Args:
        model: A model file (``.onnx``, ``.npz``, ``.py`` or ``file.py:factory``).
        grid: A CSV file, one row per configuration, knob columns (and optionally ``config``).
        slots: The training table's knob slots (None: the grid's own knob names, sorted).

    Returns:
        TableDataset: One graph, as many configurations as the grid has rows, in the grid's order.

    Raises:
        InvalidOption: If ``model`` is not a model file.
        InvalidDataFile: If the grid is unreadable, empty, too large, has a ``graph``/``runtime``/``split`` column,
            a non-numeric cell, or a knob outside ``slots``.
    """
    text = str(model)
    file, _, factory = text.rpartition(":") if ":" in Path(text).name else (text, "", "")
    path = Path(file).resolve()
    if path.suffix.lower() not in GRAPH_SUFFIXES or not path.is_file():
        raise InvalidOption(f"--input {model}: with --configs, the input is one model file "
                            f"({', '.join(GRAPH_SUFFIXES)}; file.py:factory), and this is not one")  # fmt: skip
    grid = Path(grid)
    try:
        with grid.open(newline="") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InvalidDataFile(f"--configs {grid}: not a readable CSV ({exc})") from None
    if not rows or not [c for c in rows[0] if c.strip()]:
        raise InvalidDataFile(f"--configs {grid}: empty (a header of knob names, then one row per configuration)")
    header, body = [c.strip() for c in rows[0]], [r for r in rows[1:] if any(cell.strip() for cell in r)]
    if not body:
        raise InvalidDataFile(f"--configs {grid}: no configuration rows under the header")
    if len(body) > MAX_ROWS:
        raise InvalidDataFile(f"--configs {grid}: {len(body):,} rows, above the limit of {MAX_ROWS:,}")
    bad = next((c for c in header if c in FORBIDDEN), None)
    if bad is not None:
        raise InvalidDataFile(f"--configs {grid}: column '{bad}': a grid lists configurations of the --input "
                              "model, without runtimes (drop the column)")  # fmt: skip
    knobs = [c for c in header if c != "config"]
    if slots is not None:
        unknown = sorted({k for k in knobs if k.rpartition(".")[2] not in slots})
        if unknown:
            raise InvalidDataFile(f"--configs {grid}: knob '{unknown[0]}' was not a knob of the model's training "
                                  f"table (its knobs: {', '.join(sorted(slots))})")  # fmt: skip
    spec = f"{path}:{factory or PY_FACTORY}" if path.suffix.lower() == ".py" else str(path)
    with tempfile.TemporaryDirectory(prefix="mlsysopt-grid-") as tmp:
        table = Path(tmp) / "runtimes.csv"
        if not factory:  # the graph is named by its file's stem, as in a table's graphs/ folder
            (Path(tmp) / "graphs").mkdir()
            (Path(tmp) / "graphs" / path.name).symlink_to(path)
            spec = path.stem
        with table.open("w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(["graph", "split", "runtime", *header])
            for r in body:
                out.writerow([spec, "test", 1.0, *r])
        try:
            return TableDataset(table, "test", slots=slots)
        except InvalidDataFile as exc:
            raise InvalidDataFile(str(exc).replace(str(table), f"--configs {grid}")) from None
