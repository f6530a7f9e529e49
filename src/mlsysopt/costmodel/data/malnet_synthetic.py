"""SYNTHETIC MalNet-like function-call graphs (:func:`synth_malnet`, :func:`malnet_like_graph`).

One generative family per type: addisplay = preferential attachment (hubs call many functions), adware = power-law
cluster (attachment + triangle closure), benign = recursive call tree plus calls into shared utility functions,
downloader = small world (rewired ring), trojan = communities of uneven size and density; 2 families (parameter
variants) per type. 10-60% of each graph's calls go to random functions (the types overlap), and every graph is
thinned to a random 1.4-1.9 edges per node from the same size range, so size and density alone say nothing
(measured: a GBDT on (n, m/n) is at chance, one on degree-profile aggregates gets ~0.9). Node ids are shuffled;
everything is vectorised numpy, so memory is O(edges) and 1M-node graphs take seconds.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from mlsysopt.costmodel.data.malnet import MALNET_CLASSES, write_edgelist, write_split_file
from mlsysopt.errors import InvalidOption


def draw_size(spec: int | tuple[int, int], rng: np.random.Generator, what: str) -> int:
    """``spec`` if an int, else log-uniform in the range ``(lo, hi)``; InvalidOption below 2."""
    lo, hi = (spec, spec) if isinstance(spec, int) else (int(spec[0]), int(spec[1]))
    if lo < 2 or hi < lo:
        raise InvalidOption(f"{what} must be an int >= 2 or a range (lo, hi) with 2 <= lo <= hi, got {spec}")
    return int(np.exp(rng.uniform(np.log(lo), np.log(hi + 1)))) if hi > lo else lo


MALNET_GENERATORS: dict[str, str] = {
    "addisplay": "preferential",
    "adware": "clustered",
    "benign": "call_tree",
    "downloader": "small_world",
    "trojan": "communities",
}


def _oriented(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    flip = rng.random(a.shape[0]) < 0.5
    return np.stack([np.where(flip, b, a), np.where(flip, a, b)])


def malnet_like_graph(cls: str, num_nodes: int, rng: np.random.Generator, variant: int = 0) -> np.ndarray:
    """SYNTHETIC directed call graph ``(2, m)`` of MalNet type ``cls`` (ids shuffled, no self-loops or duplicates).

    Args:
        cls: MalNet type: ``addisplay``, ``adware``, ``benign``, ``downloader`` or ``trojan``.
        num_nodes: Number of nodes, >= 3.
        rng: Random generator.
        variant: Generator variant (its parity changes the parameters).

    Returns:
        np.ndarray: Directed caller -> callee edges.

    Shapes:
        output: (2, num_edges) int64

    Raises:
        InvalidOption: For an unknown type or fewer than 3 nodes.
    """
    if cls not in MALNET_GENERATORS:
        raise InvalidOption(f"unknown MalNet type '{cls}' (choose from: {', '.join(MALNET_CLASSES)})")
    if num_nodes < 3:
        raise InvalidOption(f"a synthetic MalNet graph needs >= 3 nodes, got {num_nodes}")
    n, kind = num_nodes, MALNET_GENERATORS[cls]
    new = np.arange(1, n, dtype=np.int64)
    if kind == "preferential":  # target ~ floor(i * U^2): in-degree ~ power law, as Barabasi-Albert
        i = np.repeat(new, 2)
        e = np.stack([(i * rng.random(i.size) ** (2.0 + variant % 2)).astype(np.int64), i])  # hub calls newcomer
    elif kind == "clustered":  # attachment + triangle closure through the target's own first target
        t = (new * rng.random(new.size) ** (2.0 + variant % 2)).astype(np.int64)
        first = np.concatenate([[0], t])
        e = np.concatenate([_oriented(new, t, rng), _oriented(new, first[t], rng)], axis=1)
    elif kind == "call_tree":  # caller -> callee tree plus calls into a few shared utilities
        parent = (new * rng.random(new.size) ** (1.0 + variant % 2)).astype(np.int64)
        hubs = rng.choice(n, max(2, int(np.sqrt(n) / 2)), replace=False)
        calls = rng.random(new.size) < 0.95
        util = hubs[np.minimum(rng.zipf(1.5, int(calls.sum())) - 1, hubs.size - 1)]
        e = np.concatenate([np.stack([parent, new]), np.stack([new[calls], util])], axis=1)
    elif kind == "small_world":  # ring with 2 forward neighbours, rewired with p = 0.1 / 0.2
        i = np.repeat(np.arange(n, dtype=np.int64), 2)
        j = (i + np.tile([1, 2], n)) % n
        rewire = rng.random(j.size) < 0.1 * (1 + variant % 2)
        j[rewire] = rng.integers(0, n, int(rewire.sum()))
        e = _oriented(i, j, rng)
    else:  # communities of uneven size and density, 90% of calls stay inside
        k = max(1, n // (60 + 120 * (variant % 2)))
        start = np.r_[0, np.sort(rng.choice(np.arange(1, n), k - 1, replace=False))].astype(np.int64)
        size = np.diff(np.r_[start, n])
        block = np.repeat(np.arange(k), size)
        rate = rng.gamma(4.0, 0.65, size.size)
        deg = rng.poisson(rate[block])
        i = np.repeat(np.arange(n, dtype=np.int64), deg)
        b = block[i]
        inside = start[b] + (rng.random(i.size) * size[b]).astype(np.int64)
        e = np.stack([i, np.where(rng.random(i.size) < 0.9, inside, rng.integers(0, n, i.size))])
    noise = rng.random(e.shape[1]) < rng.uniform(0.1, 0.6)  # random calls blur every family (no easy 100%)
    e[1, noise] = rng.integers(0, n, int(noise.sum()))
    e = e[:, e[0] != e[1]]
    e = np.unique(e[0] * n + e[1])
    keep = int(rng.uniform(1.4, 1.9) * n)  # the same density range for every type: edge counts tell nothing
    if e.size > keep:
        e = np.sort(rng.choice(e, keep, replace=False))
    perm = rng.permutation(n)
    return np.stack([perm[e // n], perm[e % n]])


def synth_malnet(
    out_dir: str | Path,
    graphs_per_class: int = 20,
    nodes: int | tuple[int, int] = (2000, 20000),
    seed: int = 0,
) -> dict[str, list[str]]:
    """Write SYNTHETIC MalNet-like graphs ``out_dir/<type>/<family>/<sha>.edgelist`` and ``out_dir/split_info/*.txt``.

    Families are ``synthetic-<generator>-<variant>`` (2 per type); splits are 70/10/20 per type. Returns the names
    per split. Memory is O(edges) of the largest graph.

    Args:
        out_dir: Output folder.
        graphs_per_class: Graphs per MalNet type, >= 3.
        nodes: Node count, or a ``(lo, hi)`` range drawn log-uniformly; >= 2.
        seed: Seed of the generator.

    Returns:
        dict[str, list[str]]: Graph names (``type/family/sha``) per split (``train``, ``val``, ``test``).

    Raises:
        InvalidOption: For ``graphs_per_class`` < 3 or a bad ``nodes``.
    """
    if graphs_per_class < 3:
        raise InvalidOption(f"graphs_per_class must be >= 3 (one per split), got {graphs_per_class}")
    out = Path(out_dir)
    splits: dict[str, list[str]] = {"train": [], "val": [], "test": []}
    for ci, cls in enumerate(MALNET_CLASSES):
        names = []
        for k in range(graphs_per_class):
            rng = np.random.default_rng([seed, ci, k])
            n, variant = draw_size(nodes, rng, "nodes"), k % 2
            e = malnet_like_graph(cls, n, rng, variant)
            fam = f"synthetic-{MALNET_GENERATORS[cls]}-{variant}"
            sha = hashlib.sha256(f"mlsysopt-synthetic-malnet-{seed}-{cls}-{k}".encode()).hexdigest().upper()
            header = [
                f"SYNTHETIC MalNet-like function call graph (mlsysopt), type {cls}, family {fam}",
                f"Generator: {MALNET_GENERATORS[cls]} variant {variant}, seed {seed}",
                f"Nodes: {int(e.max()) + 1} Edges: {e.shape[1]}",
                "Directed: caller -> callee",
                "FromNodeId\tToNodeId",
            ]
            write_edgelist(out / cls / fam / f"{sha}.edgelist", e, header)
            names.append(f"{cls}/{fam}/{sha}")
        order = np.random.default_rng([seed, ci, 10**6]).permutation(graphs_per_class)
        n_val, n_test = max(1, round(0.1 * graphs_per_class)), max(1, round(0.2 * graphs_per_class))
        cut = graphs_per_class - n_val - n_test
        for split, part in (("train", order[:cut]), ("val", order[cut : cut + n_val]), ("test", order[cut + n_val :])):
            splits[split] += [names[j] for j in sorted(part)]
    for split, names in splits.items():
        write_split_file(out / "split_info" / f"{split}.txt", names)
    return splits
