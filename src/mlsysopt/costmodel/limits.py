"""Size limits of the cost-model commands, derived from this machine's memory and a day of compute.

Every size option is checked here before anything is allocated; each error says the limit and why. Memory
limits take half of the machine's RAM (``os.sysconf``); time limits assume about 1e9 simple operations per second
and allow one day (synthetic data) or one week (training) for what the option alone implies.
"""

from __future__ import annotations

import os

from mlsysopt.errors import InvalidOption

#: Bytes a graph node costs in memory: 140 float32 features, an opcode, ~1.3 edges of two int64, the plan's arrays.
NODE_BYTES = 140 * 4 + 8 + 1.3 * 16 + 64
#: Bytes per (configuration, configurable node): 18 float32 features.
CONFIG_BYTES = 18 * 4
#: The most configurable nodes a synthetic graph has per node (realistic generator: ~0.3%, simple: ~15%).
CONFIGURABLE_FRACTION = 0.15
DAY_OPS = 86_400 * 1e9
#: Hidden sizes and layer counts beyond these are not cost models a CPU (or one GPU) trains.
MAX_HIDDEN = 4096
MAX_LAYERS = 64
#: Most epochs of one training phase (``--epochs``, ``--finetune-epochs``, and so ``--validate-every``): the
#: TpuGraphs and MalNet recipes train for tens of epochs; a longer run is a shorter one continued with ``--resume``.
MAX_EPOCHS = 100_000
#: Most graphs ``costmodel synth`` writes into one folder (one file each; a stopped synth of 10^9 graphs had left
#: 11,093 files behind): a larger data set is several ``--out`` folders.
MAX_GRAPHS = 100_000


def memory_bytes() -> float:
    """Half of this machine's physical memory (the budget every limit here uses)."""
    try:
        return 0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: assume 16 GiB
        return 8.0 * 2**30


def max_nodes() -> int:
    """Most nodes one graph may have: its arrays must fit in the memory budget."""
    return int(memory_bytes() / NODE_BYTES)


def _gb(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


def check_count(name: str, value: int, limit: int, why: str) -> None:
    """InvalidOption naming ``name``, its ``limit`` and ``why`` when ``value`` exceeds it."""
    if value > limit:
        raise InvalidOption(f"{name} {value:,} is above the limit of {limit:,} ({why})")


def check_synth(nodes: int, configs: int, graphs: int) -> None:
    """Limits of ``costmodel synth``: one graph fits in memory, all of them are generated within a day.

    Args:
        nodes: Nodes of the largest graph.
        configs: Configurations per graph.
        graphs: Graphs to generate in all.

    Raises:
        InvalidOption: If a count exceeds what this machine's memory or a day of generation allows.
    """
    mem = memory_bytes()
    check_count("--nodes", nodes, max_nodes(), f"one graph's arrays must fit in half the memory, {_gb(mem)}")
    per_config = max(1.0, CONFIGURABLE_FRACTION * nodes) * CONFIG_BYTES
    why = f"{nodes:,}-node graphs hold ~{per_config:,.0f} bytes per configuration; {_gb(mem)} of memory"
    check_count("--configs", configs, int(mem / per_config), why)
    per_graph = nodes * 50.0 + configs * nodes * 0.05
    check_count("--graphs", graphs, max(1, int(DAY_OPS / per_graph)),
                f"about {per_graph:,.0f} operations per graph: one day of generation")  # fmt: skip


def check_graph_files(graphs: object, files: int) -> None:
    """InvalidOption when ``--graphs graphs`` means more than :data:`MAX_GRAPHS` files (every split) in one folder."""
    if files > MAX_GRAPHS:
        shown = f"{graphs:,}" if isinstance(graphs, int) else ",".join(f"{k}={v}" for k, v in dict(graphs).items())
        raise InvalidOption(
            f"--graphs {shown}: {files:,} graph files (every split) are above the limit of {MAX_GRAPHS:,} in one "
            "folder; write a larger data set as several --out folders"
        )


def check_train(hidden: int, layers: int, segment_size: int, configs_per_graph: int, graphs_per_step: int,
                k: int) -> None:  # fmt: skip
    """Limits of ``costmodel train``: a training step's activations fit in memory.

    Args:
        hidden: Hidden width.
        layers: GNN layers.
        segment_size: Nodes per segment.
        configs_per_graph: Configurations per graph per step.
        graphs_per_step: Graphs per step.
        k: Segments sampled for gradients per step.

    Raises:
        InvalidOption: If a value exceeds its limit (a step's activations must fit in memory).
    """
    check_count("--hidden", hidden, MAX_HIDDEN, "wider models do not fit a CPU training step")
    check_count("--layers", layers, MAX_LAYERS, "deeper message passing reaches no further in a segment")
    mem = memory_bytes()
    check_count("--segment-size", segment_size, max_nodes(), f"a segment must fit in half the memory, {_gb(mem)}")
    # a sampled segment keeps ~8 tensors of (configs x nodes x hidden) float32 per layer for the backward pass
    per_config = 8.0 * 4 * segment_size * hidden * max(1, layers) * max(1, k)
    check_count("--configs-per-graph", configs_per_graph, max(2, int(mem / per_config)),
                f"{segment_size:,}-node segments x {k} sampled x hidden {hidden} x {layers} layers need "
                f"~{per_config / 2**20:,.1f} MiB of activations per configuration; {_gb(mem)} of memory")  # fmt: skip
    check_count("--graphs-per-step", graphs_per_step, 1_000_000, "a step's graphs are processed one after another")


def check_epochs(epochs: int, finetune_epochs: int, validate_every: int) -> None:
    """Limits of ``costmodel train``'s epoch counts: each at most :data:`MAX_EPOCHS`.

    Raises:
        InvalidOption: Naming the option and :data:`MAX_EPOCHS` when one is above it.
    """
    why = "epochs of one phase; continue a shorter run with --resume"
    check_count("--epochs", epochs, MAX_EPOCHS, why)
    check_count("--finetune-epochs", finetune_epochs, MAX_EPOCHS, why)
    check_count("--validate-every", validate_every, MAX_EPOCHS, "epochs between validations")
