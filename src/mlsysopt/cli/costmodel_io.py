"""Option types and parsers for ``mlsysopt costmodel``: ranges like 1000-5000 and per-split graph counts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlsysopt.errors import InvalidOption

DataOpt = Annotated[
    Path,
    typer.Option("--data", help="TpuGraphs root ({train,valid,test}/*.npz) or MalNet root (with split_info/)."),
]
RunOpt = Annotated[Path, typer.Option("--run", help="A training run folder (or its checkpoint.pt).")]
SplitOpt = Annotated[str, typer.Option("--split", help="train | valid | test (when the input is a data root).")]


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
