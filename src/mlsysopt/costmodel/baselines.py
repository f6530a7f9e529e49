"""The tree baselines by name, and reading one back from its run folder (``trees.json`` says which it is)."""

from __future__ import annotations

from pathlib import Path

from mlsysopt.costmodel.boosting import LightGBMRanker, XGBoostRanker
from mlsysopt.costmodel.train_config import DEFAULT_ROUNDS
from mlsysopt.costmodel.trees import META_NAME, TreeRanker, TreesModel
from mlsysopt.errors import InvalidCheckpoint, InvalidOption
from mlsysopt.io import read_json

#: ``--mode`` -> model class.
TREE_BASELINES: dict[str, type[TreeRanker]] = {"trees": TreesModel, "lightgbm": LightGBMRanker,
                                               "xgboost": XGBoostRanker}  # fmt: skip


def tree_model(mode: str, task: str, seed: int = 0, threads: int = 1, rounds: int = DEFAULT_ROUNDS) -> TreeRanker:
    """A fresh tree baseline for ``--mode`` trees | lightgbm | xgboost.

    Args:
        mode: ``"trees"``, ``"lightgbm"`` or ``"xgboost"``.
        task: ``"layout"`` or ``"tile"``.
        seed: Seed of the model.
        threads: Threads the library may use.
        rounds: Most boosting rounds; validation picks how many are used.

    Returns:
        TreeRanker: An untrained model.

    Raises:
        InvalidOption: For an unknown mode or a task that is not ranked.
    """
    if mode not in TREE_BASELINES:
        raise InvalidOption(f"unknown tree baseline '{mode}' (choose from: {', '.join(TREE_BASELINES)})")
    return TREE_BASELINES[mode](task, seed=seed, rounds=rounds, threads=threads)


def load_trees(folder: str | Path) -> TreeRanker:
    """Read a tree baseline's run folder, or raise InvalidCheckpoint saying why not.

    Args:
        folder: Run folder of a tree baseline.

    Returns:
        TreeRanker: The trained model.

    Raises:
        InvalidCheckpoint: If the description or model file is missing, unreadable or of an unknown library.
    """

    folder = Path(folder)
    meta = read_json(folder / META_NAME, InvalidCheckpoint)
    if not isinstance(meta, dict) or meta.get("kind") != "mlsysopt-costmodel-trees":
        raise InvalidCheckpoint(f"{folder / META_NAME}: not a trees model description")
    by_library = {cls.library: cls for cls in TREE_BASELINES.values()}
    library = meta.get("library", "sklearn")
    if library not in by_library:
        raise InvalidCheckpoint(f"{folder / META_NAME}: unknown library '{library}' (this build has "
                                f"{', '.join(by_library)})")  # fmt: skip
    return by_library[library].from_folder(folder, meta)
