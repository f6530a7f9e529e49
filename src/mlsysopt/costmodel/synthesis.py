"""``synth``: write a SYNTHETIC data root in the published formats (TpuGraphs layout/tile ``.npz``, MalNet edgelists).

Layout graphs come from the realistic generator by default (:mod:`mlsysopt.costmodel.data.realistic`: clustered,
heavy-tailed runtimes with ties and a noise floor, like real TpuGraphs runtimes) or the simple one
(``profile="simple"``, :mod:`mlsysopt.costmodel.data.synthetic`). Sizes are checked against the machine's limits
(:mod:`mlsysopt.costmodel.limits`) before anything is written. A folder that already holds files is refused
(old and new graphs would mix); ``overwrite=True`` first removes what an earlier ``synth`` wrote there, and still
refuses a folder holding anything else. The data is written to ``out/.synth-partial`` and moved up when it is
complete: a synth that fails or is stopped leaves no partial files.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from mlsysopt.costmodel.limits import check_graph_files, check_synth
from mlsysopt.errors import InvalidOption

#: What ``synth`` writes: TpuGraphs layout or tile ``.npz`` splits, or MalNet edgelists with split files.
SYNTH_KINDS: tuple[str, ...] = ("layout", "tile", "malnet")
PROFILES: tuple[str, ...] = ("realistic", "simple")
PARTIAL = ".synth-partial"  # the folder inside ``out`` a synth writes to until it is complete


def _ours(root: Path, p: Path) -> bool:
    """Whether ``p`` (under ``root``) is something an earlier synth wrote."""
    rel = p.relative_to(root).parts
    if len(rel) == 2 and rel[0] in ("train", "valid", "test") and rel[1].startswith("synthetic_"):
        return rel[1].endswith(".npz")
    if len(rel) == 2 and rel[0] == "split_info":
        return rel[1] in ("train.txt", "val.txt", "test.txt")
    return len(rel) == 3 and rel[1].startswith("synthetic-") and rel[2].endswith(".edgelist")


def prepare_folder(out: str | Path, overwrite: bool) -> None:
    """Refuse a non-empty ``out`` (or, with ``overwrite``, remove only an earlier synth's files)."""
    root = Path(out)
    if root.exists() and not root.is_dir():
        raise InvalidOption(f"--out {root} exists and is not a folder")
    if not root.is_dir():
        return
    files = [p for p in root.rglob("*") if p.is_file() or p.is_symlink()]
    if not files:
        return
    if not overwrite:
        raise InvalidOption(f"--out {root} is not empty ({len(files)} files): old and new graphs would mix; "
                            "choose an empty folder or pass --overwrite")  # fmt: skip
    foreign = [p for p in files if p.is_symlink() or not _ours(root, p)]
    if foreign:
        raise InvalidOption(f"--out {root} holds files synth did not write (e.g. {foreign[0]}): "
                            "--overwrite only replaces synthetic data; choose another folder")  # fmt: skip
    for p in files:
        p.unlink()
    for d in sorted((d for d in root.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        if not any(d.iterdir()):
            shutil.rmtree(d)


def synth(
    kind: str,
    out: str | Path,
    graphs: int | Mapping[str, int] = 20,
    nodes: int | tuple[int, int] = (1000, 5000),
    configs: int | tuple[int, int] = 64,
    seed: int = 0,
    profile: str = "realistic",
    overwrite: bool = False,
) -> dict[str, int]:
    """Write a SYNTHETIC data root in the published format of ``kind``; returns the graphs written per split.

    ``graphs``: a count or {split: count} for layout and tile; graphs per class for malnet (split 70/10/20).
    ``profile`` picks the layout generator (realistic | simple).

    Args:
        kind: ``"layout"``, ``"tile"`` or ``"malnet"``.
        out: Data root to write.
        graphs: Graph count or ``{split: count}`` (layout, tile); graphs per class for malnet (an int).
        nodes: Node count, or a ``(lo, hi)`` range drawn log-uniformly.
        configs: Configurations per graph, or a ``(lo, hi)`` range (ignored for malnet).
        seed: Seed.
        profile: Layout runtime generator, ``"realistic"`` or ``"simple"``.
        overwrite: Whether to replace an existing data root.

    Returns:
        dict[str, int]: Graphs written per split.

    Raises:
        InvalidOption: For an unknown kind or profile, bad counts, or sizes beyond this machine's limits.
    """
    # deferred: imports numba, scipy, yaml
    from mlsysopt.costmodel.data import synth_layout, synth_malnet, synth_tile

    if kind not in SYNTH_KINDS:
        raise InvalidOption(f"unknown kind '{kind}' (choose from: {', '.join(SYNTH_KINDS)})")
    if profile not in PROFILES:
        raise InvalidOption(f"unknown profile '{profile}' (choose from: {', '.join(PROFILES)})")
    if kind == "malnet" and not isinstance(graphs, int):
        raise InvalidOption("--graphs for malnet is a count per class (splits are 70/10/20)")
    hi_nodes = nodes if isinstance(nodes, int) else max(nodes)
    hi_configs = configs if isinstance(configs, int) else max(configs)
    total = graphs * 5 if isinstance(graphs, int) and kind == "malnet" else graphs
    total = sum(total.values()) if isinstance(total, Mapping) else int(total * 1.5 if kind != "malnet" else total)
    check_graph_files(graphs, total)
    check_synth(hi_nodes, hi_configs if kind != "malnet" else 1, total)
    root = Path(out)
    part = root / PARTIAL  # written here, moved up when complete: a failed or stopped synth leaves no half root
    if part.is_dir() and not part.is_symlink():
        shutil.rmtree(part)  # what a killed synth left
    prepare_folder(out, overwrite)
    made = not root.exists()
    try:
        if kind == "malnet":
            written: Mapping[str, list] = synth_malnet(part, graphs_per_class=graphs, nodes=nodes, seed=seed)  # type: ignore[arg-type]
        elif kind == "layout":
            written = synth_layout(part, num_graphs=graphs, nodes=nodes, configs=configs, seed=seed, profile=profile)
        else:
            written = synth_tile(part, num_graphs=graphs, nodes=nodes, configs=configs, seed=seed)
        for child in part.iterdir():
            child.rename(root / child.name)
    finally:  # done, failed or stopped (Ctrl-C, SIGTERM): no partial files
        shutil.rmtree(part, ignore_errors=True)
        if made and root.is_dir() and not any(root.iterdir()):
            root.rmdir()
    return {split: len(names) for split, names in written.items()}
