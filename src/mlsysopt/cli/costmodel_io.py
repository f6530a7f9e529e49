"""Option types and parsers for ``mlsysopt costmodel``: ranges like 1000-5000, per-split graph counts, train options."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlsysopt.errors import InvalidOption

DataOpt = Annotated[
    Path,
    typer.Option(
        "--data",
        help="TpuGraphs root ({train,valid,test}/*.npz), MalNet root (with split_info/), or a "
        "runtime table (runtimes.csv|.parquet + graphs/, see README).",
    ),
]
RunOpt = Annotated[Path, typer.Option("--run", help="A training run folder (or its checkpoint.pt).")]
SplitOpt = Annotated[str, typer.Option("--split", help="train | valid | test (when the input is a data root).")]
OneShotOut = Annotated[Path | None, typer.Option("--out", help="Run folder for result.json (and settings.json).")]
MODE_HELP = ("full | gst | gst+e | gst+ef | gst+efd (E: history table, F: head finetune, D: stale embedding "
             "dropout) | trees (scikit-learn gradient boosting) | lightgbm (lambdarank) | "
             "xgboost (rank:pairwise).")  # fmt: skip


def opt(name: str, help: str, **kw: object) -> object:
    """A typer option ``--name`` with its help (defaults are shown by typer)."""
    return typer.Option(name, help=help, **kw)  # type: ignore[arg-type]


# every train option of TrainConfig that the CLI exposes, with its help; the CLI passes them through by name
ModeOpt = Annotated[str, opt("--mode", MODE_HELP)]
SegSizeOpt = Annotated[
    str, opt("--segment-size", "Most nodes per segment, or auto (1000, or the whole graph when it is smaller).")
]
SegmenterOpt = Annotated[
    str, opt("--segmenter", "auto (contiguous for TpuGraphs, METIS for MalNet) | contiguous | metis.")
]
KOpt = Annotated[str, opt("--k", "Segments per graph that get gradients each step, or auto (from the budget).")]
BudgetOpt = Annotated[
    float | None, opt("--memory-budget-mb", "Step-memory budget (MB) k is chosen from [default: 256 with --k auto].")
]
SedPOpt = Annotated[float, opt("--sed-p", "Stale Embedding Dropout probability (gst+efd).")]
SedPolicyOpt = Annotated[str, opt("--sed-policy", "uniform (drop with p) | age (p grows with a row's age).")]
HistoryKeyOpt = Annotated[
    str, opt("--history-key", "signature (rows shared by equal sub-configs) | config (reference).")
]
RefreshOpt = Annotated[str, opt("--refresh", "varying (recompute segments the configs differ on) | stalest | none.")]
SampleOpt = Annotated[str, opt("--sample", "varying (sample segments the configs differ on) | uniform (reference).")]
EpochsOpt = Annotated[int, opt("--epochs", "Training epochs in total (a resumed run does what is missing).")]
FtEpochsOpt = Annotated[int, opt("--finetune-epochs", "Head-only epochs in total (F modes).")]
LrOpt = Annotated[float, opt("--lr", "Adam learning rate.")]
LossOpt = Annotated[str, opt("--loss", "auto | hinge | listmle | mse | logmse (absolute: a latency model) | ce.")]
BackboneOpt = Annotated[str, opt("--backbone", "sage | gcn | gin.")]
HiddenOpt = Annotated[int, opt("--hidden", "Hidden width.")]
LayersOpt = Annotated[int, opt("--layers", "GNN layers.")]
ReadoutOpt = Annotated[str, opt("--readout", "auto | scalar (sum of segment scores) | embedding (score of the sum).")]
DeviationOpt = Annotated[
    bool | None, opt("--deviation/--no-deviation", "Layout: mark where a config deviates from the usual [default: on].")
]
ConfigsOpt = Annotated[int, opt("--configs-per-graph", "Configs sampled per graph and step.")]
GpsOpt = Annotated[int, opt("--graphs-per-step", "Graphs per optimizer step (split over --workers).")]
ValidateOpt = Annotated[int, opt("--validate-every", "Validate every N epochs (and at the end of each phase).")]
PruneOpt = Annotated[
    str,
    opt("--prune-hops", "Layout: keep configurable nodes + N-hop neighbours: N | auto (layers, ranking losses) | off."),
]
KeepBestOpt = Annotated[
    bool, opt("--keep-best/--no-keep-best", "Test and predict with the best validation epoch's weights.")
]
CrossOpt = Annotated[int, opt("--cross-config-heads", "Layout: cross-configuration attention heads (0: off).", min=0)]
RoundsOpt = Annotated[
    int | None,
    opt("--rounds", "Most boosting rounds (tree modes); validation picks how many are used [default: 400]."),
]
DeviceOpt = Annotated[str, opt("--device", "cpu | cuda (cuda:N).")]
ThreadsOpt = Annotated[
    int, opt("--threads", "PyTorch CPU threads per worker (1 is fastest for small segments).", min=1, max=1024)
]
ResumeOpt = Annotated[bool, opt("--resume/--no-resume", "Continue RUN_DIR/checkpoint.pt after a stop.")]
ProfileOpt = Annotated[str, opt("--profile", "Layout generator: realistic (clustered, tied runtimes) | simple.")]
OverwriteOpt = Annotated[bool, opt("--overwrite/--no-overwrite", "Replace an earlier synth's graphs in --out.")]


def auto_int(value: str, option: str, low: int = 1) -> int | str:
    """``'auto'`` or an integer (its range is checked by TrainConfig); anything else is an InvalidOption."""
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise InvalidOption(f"{option} '{value}': expected auto or an integer >= {low}") from None


def parse_prune(value: str) -> int | str | None:
    """``--prune-hops``: ``auto``, ``off`` (None) or hops >= 0."""
    if str(value).strip().lower() in ("off", "none"):
        return None
    return auto_int(value, "--prune-hops", low=0)


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
