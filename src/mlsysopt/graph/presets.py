"""Named device clusters in real units (``--cluster preset:NAME``), and :func:`load_cluster`, the one way every
command turns ``--cluster`` / ``--devices`` into a :class:`~mlsysopt.graph.cluster.DeviceCluster`.

Peak FP32 throughput is cores x clock x FP32 FLOP per core and cycle (or the vendor's figure); bandwidths are
the link's nominal rate per direction. Sources are in :data:`SOURCES` (and the README); latencies are typical
one-way figures, which spec sheets do not give, and are marked as estimates there.

For a ``workflow`` or ``synthetic`` graph (compute in seconds on the machine that recorded the trace, or unitless)
a preset's speeds become ratios to its ``reference`` device, which runs the graph's compute as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import InvalidCluster
from mlsysopt.graph.limits import check_devices
from mlsysopt.graph.units import units_of, warn_mismatch

if TYPE_CHECKING:
    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.ir import CompGraph

PREFIX = "preset:"

# ---------------------------------------------------------------------------- devices (FP32 FLOP/s)
#: Raspberry Pi 4 Model B: 4 x Cortex-A72 at 1.5 GHz, 8 FP32 FLOP/cycle (one 4-lane NEON FMA).
RPI4 = 4 * 1.5e9 * 8
#: Jetson Orin Nano 8 GB: 1024 Ampere CUDA cores at 625 MHz, 2 FLOP (one FMA) per core and cycle.
ORIN_NANO = 1024 * 0.625e9 * 2
#: Intel Core i7-1165G7 laptop: 4 cores at 2.8 GHz base, 32 FP32 FLOP/cycle (one AVX-512 FMA unit).
LAPTOP = 4 * 2.8e9 * 32
#: NVIDIA A100 (SXM4 or PCIe): 19.5 TFLOP/s FP32 (vendor figure).
A100 = 19.5e12
#: AMD EPYC 7742 socket: 64 cores at 2.25 GHz base, 32 FP32 FLOP/cycle (two 256-bit FMA units).
EPYC_7742 = 64 * 2.25e9 * 32
#: One of its 8 core complex dies (8 cores).
EPYC_CCD = EPYC_7742 / 8

# ---------------------------------------------------------------------------- links (B/s per direction, s)
GBE = 1e9 / 8  # Gigabit Ethernet, 1000 Mb/s
LAN_DELAY = 100e-6  # estimate: one-way latency through one switched Gigabit Ethernet hop
NVLINK3 = 300e9  # A100 NVLink: 600 GB/s total, both directions
NVLINK_DELAY = 5e-6  # estimate: GPU-to-GPU copy start-up over NVLink/NVSwitch
PCIE4_X16 = 32e9  # A100 PCIe Gen4: 64 GB/s total, both directions (31.5 GB/s usable per direction)
PCIE_DELAY = 10e-6  # estimate: copy start-up across the PCIe root complex
DDR4_SOCKET = 204.8e9  # EPYC 7742: 8 channels of DDR4-3200
DRAM_DELAY = 100e-9  # estimate: one DRAM round trip between core complexes

# ---------------------------------------------------------------------------- per-task overhead (s)
# What every operator costs on a device besides its FLOPs (framework dispatch on a CPU, a kernel launch on a GPU):
# it dominates small models (a tiny ViT runs 83 µs here for ~0.4 MFLOP). Spec sheets do not give it; the CPU figure
# is measured on this project's machine (a PyTorch module call on one AMD EPYC core: 4.4-8.9 µs), the others are
# estimates scaled from it and from typical CUDA launch latencies (a few µs).
CPU_OP_OVERHEAD = 5e-6  # measured here: one PyTorch module call on a server-class x86 core
LAPTOP_OP_OVERHEAD = 5e-6  # estimate: the same dispatch on a laptop x86 core
RPI_OP_OVERHEAD = 20e-6  # estimate: the same dispatch on a Cortex-A72 (about 4x slower per core)
GPU_OP_OVERHEAD = 5e-6  # estimate: a CUDA kernel launch plus the framework's dispatch on the host
ORIN_OP_OVERHEAD = 10e-6  # estimate: a CUDA launch dispatched from the Orin's ARM cores
#: Per-task overhead by device kind (a preset device's name without its digits), for DNN graphs.
OP_OVERHEAD: dict[str, float] = {
    "rpi": RPI_OP_OVERHEAD,
    "orin": ORIN_OP_OVERHEAD,
    "laptop": LAPTOP_OP_OVERHEAD,
    "server": GPU_OP_OVERHEAD,
    "gpu": GPU_OP_OVERHEAD,
    "cpu": CPU_OP_OVERHEAD,
    "ccd": CPU_OP_OVERHEAD,
}

#: Where every number above comes from.
SOURCES: dict[str, str] = {
    "Raspberry Pi 4 Model B": "https://www.raspberrypi.com/products/raspberry-pi-4-model-b/specifications/",
    "Jetson Orin Nano 8 GB": "https://developer.nvidia.com/embedded/jetson-modules",
    "Intel Core i7-1165G7": "https://www.intel.com/content/www/us/en/products/sku/208921/"
    "intel-core-i71165g7-processor-12m-cache-up-to-4-70-ghz/specifications.html",
    "NVIDIA A100": "https://www.nvidia.com/en-us/data-center/a100/",
    "AMD EPYC 7742": "https://www.amd.com/en/products/cpu/amd-epyc-7742",
    "Gigabit Ethernet": "IEEE 802.3ab (1000BASE-T), 1000 Mb/s",
    "per-task overhead": "measured on this project's machine for CPUs (benchmarks/placement.py, sim_vs_measured); "
    "estimates for the other devices (see OP_OVERHEAD)",
}


@dataclass(frozen=True)
class Preset:
    """A named device mix: devices (kind, FP32 FLOP/s), one link rate and latency per pair of device kinds, and
    the ``reference`` device (by name, e.g. ``laptop0``) that runs a workflow's recorded runtimes as given."""

    name: str
    description: str
    devices: tuple[tuple[str, float], ...]
    reference: str
    links: dict[tuple[str, str], tuple[float, float]]  # (group a, group b) -> (B/s, s); groups are name prefixes
    sources: tuple[str, ...]

    def link(self, a: str, b: str) -> tuple[float, float]:
        """(bandwidth B/s, delay s) between devices ``a`` and ``b``, from their groups (name up to the digits)."""
        ga, gb = _group(a), _group(b)
        for key in ((ga, gb), (gb, ga), ("*", "*")):
            if key in self.links:
                return self.links[key]
        raise KeyError((ga, gb))  # every preset below covers all of its pairs


def _group(name: str) -> str:
    return name.rstrip("0123456789")


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "edge",
            "2 Raspberry Pi 4, a Jetson Orin Nano, a laptop and an A100 server on one Gigabit Ethernet switch",
            (("rpi", RPI4), ("rpi", RPI4), ("orin", ORIN_NANO), ("laptop", LAPTOP), ("server", A100)),
            "laptop0",
            {("*", "*"): (GBE, LAN_DELAY)},
            (
                "Raspberry Pi 4 Model B",
                "Jetson Orin Nano 8 GB",
                "Intel Core i7-1165G7",
                "NVIDIA A100",
                "Gigabit Ethernet",
            ),
        ),
        Preset(
            "gpu-node-nvlink",
            "8 A100 SXM4 over NVLink/NVSwitch, and the host's EPYC 7742 socket over PCIe Gen4 x16",
            (("cpu", EPYC_7742), *(("gpu", A100),) * 8),
            "cpu0",
            {("gpu", "gpu"): (NVLINK3, NVLINK_DELAY), ("cpu", "gpu"): (PCIE4_X16, PCIE_DELAY)},
            ("NVIDIA A100", "AMD EPYC 7742"),
        ),
        Preset(
            "gpu-node-pcie",
            "4 A100 PCIe without NVLink bridges and the host's EPYC 7742 socket, all over PCIe Gen4 x16",
            (("cpu", EPYC_7742), *(("gpu", A100),) * 4),
            "cpu0",
            {("*", "*"): (PCIE4_X16, PCIE_DELAY)},
            ("NVIDIA A100", "AMD EPYC 7742"),
        ),
        Preset(
            "cpu-socket",
            "one EPYC 7742 socket as its 8 core complexes, exchanging data through its DDR4-3200 memory",
            tuple(("ccd", EPYC_CCD) for _ in range(8)),
            "ccd0",
            {("*", "*"): (DDR4_SOCKET / 8, DRAM_DELAY)},  # the socket's memory bandwidth, shared by 8 dies
            ("AMD EPYC 7742",),
        ),
    )
}


def _names(preset: Preset) -> list[str]:
    counts: dict[str, int] = {}
    out = []
    for kind, _ in preset.devices:
        out.append(f"{kind}{counts.get(kind, 0)}")
        counts[kind] = counts.get(kind, 0) + 1
    return out


def preset_cluster(name: str, graph: CompGraph | None = None) -> DeviceCluster:
    """The preset ``name`` as a cluster in ``graph``'s units, every device supporting every type it uses.

    Args:
        name: A key of :data:`PRESETS`, with or without the ``preset:`` prefix.
        graph: The graph it is for: sets the units (speeds in FLOP/s for ``dnn``, ratios to the preset's reference
            device otherwise) and the number of hardware types. None: DNN units, one type.

    Returns:
        The cluster; bandwidths in bytes/s, delays in seconds, ``meta`` naming the preset; for a DNN graph every
        device's per-task overhead (:data:`OP_OVERHEAD`, seconds), 0 otherwise.

    Raises:
        InvalidCluster: If there is no preset ``name``.
    """
    # deferred: imports numba, scipy, yaml
    from mlsysopt.graph.cluster import DeviceCluster

    key = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    if key not in PRESETS:
        raise InvalidCluster(f"no cluster preset '{key}' (presets: {', '.join(PRESETS)})")
    preset = PRESETS[key]
    names = _names(preset)
    flops = np.array([f for _, f in preset.devices])
    system = "dnn" if graph is None else units_of(graph)
    ref = flops[names.index(preset.reference)]
    speed = flops if system == "dnn" else flops / ref
    d = len(names)
    bandwidth = np.full((d, d), np.inf)
    delay = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            if i != j:
                bandwidth[i, j], delay[i, j] = preset.link(names[i], names[j])
    types = 1 if graph is None else int(graph.hw_type.max()) + 1
    meta = {"source": f"{PREFIX}{key}", "preset": preset.description, "reference_device": preset.reference}
    # a DNN operator pays its device's dispatch or launch overhead; a workflow task's recorded runtime includes its own
    overhead = np.array([OP_OVERHEAD[_group(n)] for n in names]) if system == "dnn" else np.zeros(d)
    return DeviceCluster(speed, np.ones((d, types), bool), bandwidth, delay, names, system, meta, overhead)


def load_cluster(spec: Any, graph: CompGraph | None = None, seed: int = 0) -> DeviceCluster:
    """The cluster a ``--cluster`` / ``--devices`` value names, in ``graph``'s units.

    Args:
        spec: a cluster JSON path, ``preset:NAME`` (see :data:`PRESETS`), a device count (``int`` or a string of
            digits: a seeded random heterogeneous cluster in the graph's units), or a DeviceCluster (returned).
        graph: the graph it is for (sets the units, the hardware types and the size limits; None: DNN units).
        seed: the seed of a random cluster.

    ``cluster.meta["source"]`` says where it came from. A cluster file in other units than the graph gives a
    :class:`~mlsysopt.errors.MlsysoptWarning`.
    """
    # deferred: imports numba, scipy, yaml
    from mlsysopt.graph.cluster import DeviceCluster

    if isinstance(spec, DeviceCluster):
        cluster = spec
    elif isinstance(spec, bool):
        raise InvalidCluster(f"a cluster is a JSON file, preset:NAME or a device count, not {spec!r}")
    elif isinstance(spec, (int, np.integer)) or (isinstance(spec, str) and spec.strip().isdigit()):
        cluster = _random(int(spec), graph, seed)
    elif isinstance(spec, (str, Path)) and str(spec).startswith(PREFIX):
        cluster = preset_cluster(str(spec), graph)
    elif isinstance(spec, (str, Path)) and str(spec).strip():
        path = Path(spec)
        cluster = DeviceCluster.load(path)
        cluster.meta["source"] = f"from {path}"
    else:
        raise InvalidCluster(f"a cluster is a JSON file, preset:NAME or a device count, not {spec!r}")
    if graph is not None:
        warn_mismatch(graph, cluster)
    return cluster


def _random(devices: int, graph: CompGraph | None, seed: int) -> DeviceCluster:
    # deferred: imports numba, scipy, yaml
    from mlsysopt.graph.generate import cluster_for

    if graph is None:
        raise InvalidCluster("a random cluster needs the graph it is for (its units and hardware types)")
    check_devices(devices, graph.num_nodes, "--devices")
    cluster = cluster_for(graph, devices, seed)
    cluster.meta["source"] = f"random {devices}-device cluster in {cluster.units} units (seed {seed})"
    return cluster


def describe_presets() -> list[dict[str, Any]]:
    """JSON-ready: every preset's name, description, devices and sources (for ``--help`` and the README)."""
    return [
        {"name": p.name, "description": p.description, "devices": _names(p), "sources": list(p.sources)}
        for p in PRESETS.values()
    ]
