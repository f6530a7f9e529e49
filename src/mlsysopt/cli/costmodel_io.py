"""Input parsing and output writing for ``mlsysopt costmodel``: option checks, run state, result files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from mlsysopt.cli.common import check_run_state as common_check_run_state
from mlsysopt.errors import InvalidOption

OutOpt = Annotated[Path, typer.Option("--out", help="Run directory: result.json, checkpoint.pt, plots.")]
DataOpt = Annotated[
    Path,
    typer.Option("--data", help="TpuGraphs root ({train,valid,test}/*.npz) or MalNet root (with split_info/)."),
]

#: settings that may change when a run is resumed (everything else must match the first start)
RESUMABLE = ("epochs", "finetune_epochs")


def parse_range(value: str, option: str) -> int | tuple[int, int]:
    """``'5000'`` -> 5000, ``'1000-5000'`` -> (1000, 5000); anything else is an InvalidOption."""
    try:
        parts = [int(p) for p in value.replace("..", "-").split("-")]
    except ValueError:
        raise InvalidOption(f"{option} '{value}': expected an integer or a range like 1000-5000") from None
    if len(parts) not in (1, 2) or min(parts) < 1 or (len(parts) == 2 and parts[0] > parts[1]):
        raise InvalidOption(f"{option} '{value}': expected a positive integer or a range lo-hi with lo <= hi")
    return parts[0] if len(parts) == 1 else (parts[0], parts[1])


def parse_graphs(value: str) -> int | dict[str, int]:
    """``'20'`` or ``'train=20,valid=5,test=5'`` -> graphs per split."""
    if "=" not in value:
        n = parse_range(value, "--graphs")
        if isinstance(n, tuple):
            raise InvalidOption(f"--graphs '{value}': give a count or train=N,valid=N,test=N")
        return n
    out: dict[str, int] = {}
    for item in value.split(","):
        split, _, count = item.partition("=")
        if split.strip() not in ("train", "valid", "test") or not count.strip().isdigit():
            raise InvalidOption(f"--graphs '{value}': expected train=N,valid=N,test=N")
        out[split.strip()] = int(count)
    return out


def check_run_state(out: Path, resume: bool, settings: dict[str, Any]) -> Path:
    """The checkpoint path (see :func:`mlsysopt.cli.common.check_run_state`; RESUMABLE may change on resume)."""
    return common_check_run_state(out, resume, settings, RESUMABLE)


def dataset_or_none(root: Path, split: str) -> Any:
    """The split's dataset, or None when the data root has no such split (a bad file is still an error)."""
    from mlsysopt.costmodel.data import open_dataset
    from mlsysopt.errors import InvalidDataFile

    try:
        return open_dataset(root, split)
    except InvalidDataFile as exc:
        if "no such split file" in str(exc) or "neither TpuGraphs" in str(exc):
            return None
        raise


def json_ready(value: Any) -> Any:
    """Floats stay floats, numpy scalars/arrays become Python, NaN becomes None (strict JSON)."""
    import math

    import numpy as np

    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_ready(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def ranking_of(pred: Any) -> list[int]:
    """Configuration indices from predicted fastest to slowest (lower score = faster)."""
    import numpy as np

    return [int(i) for i in np.argsort(np.asarray(pred), kind="stable")]
