"""SYNTHETIC layout graphs whose runtimes look like real TpuGraphs runtimes: heavy-tailed, clustered, tied, noisy.

Everything here is synthetic (the real TpuGraphs cannot be downloaded here); files are named ``synthetic_*``.
What the generator is calibrated against (measured on a real TpuGraphs layout graph, see issue 15): ~69% of the
configurations run within 1% of the fastest, 10-12% near 2.3x and 6-7% near 5.4x; ~20% share their exact runtime
with another configuration; configurations with identical features differ by a median 0.023% (a ~0.1% noise floor).
:func:`runtime_profile` measures those statistics; ``tests/costmodel/test_realistic.py`` checks them.

**Graph.** The XLA-like DAG of :mod:`mlsysopt.costmodel.data.synthetic` (chains, parameters, skip connections,
ranks 2-4, a palette of awkward dims, node ids in topological order), 20k-100k nodes in the benchmark.

**Cost model** (ns; one TPU core runs the ops one after another, so runtime = the sum of node costs, i.e. the
makespan of the graph on one device). Each tensor has a layout class 0-3 (see ``synthetic``); a node follows the
class of the configurable node or source it reaches within 2 operand-0 steps, else keeps its native class.

* node cost = ``base * (1 + kappa * log2 waste(class))``: ``waste`` is the padding of the minor-most dim to 128
  and the second-minor to 8 under the node's class (from its dims), ``kappa`` the op's layout sensitivity
  (dot/convolution 0.3, reduce 0.2, elementwise 0.05, parameters 0; the hot ops below 2.8);
* a **relayout copy** for every input whose class differs from the consumer's (except the operand 0 a node
  follows): 0.5 x the consumer's base cost when the consumer is a hot op, else ``overhead + elements / 200``.

**Hot ops** (heavy tail). One *dominant* dot/convolution takes 22-35% of the runtime; its dims are ``(3, d1, 128,
256)``, so class 2 puts the dim of 3 minor-most (waste 42.7: runtime about 5x) and class 3 second-minor (waste 2.7:
about 2.2x), while classes 0 and 1 are aligned. 2-4 *secondary* hot ops take 2-8% each. Hot ops and the producers
of their operands (within 2 hops) are configurable; so are ~0.3% of the other nodes (dot, convolution, reshape,
transpose, parameter), which matter far less.

**Configurations** are what a compiler's search explores around its default: configuration 0 is the default (each
configurable node in its cheapest class); every other one applies 1 + Poisson(1) mutations to the default (a
mutation gives one configurable node another class; the dominant op and its producers are picked 22% of the time,
other hot ops' 14%) and 5% re-visit an earlier configuration exactly. Measured runtime = true runtime x (1 + N(0,
2.4e-4)), quantized to 1e-4 of the default's runtime (the noise floor and the exact ties).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from mlsysopt.costmodel.data.synthetic import (
    _CANON,
    _PERM,
    _TPUT,
    CONV,
    DOT,
    PARAM,
    RESHAPE,
    TRANSPOSE,
    _anchors,
    _config_feat,
    _dag,
    _edges,
    _node_feat,
    _work,
)
from mlsysopt.errors import InvalidOption

_OVERHEAD = 200.0  # ns per executed op
_KAPPA_HOT = 2.5
_KAPPA = np.array([0, 0, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.2, 0.3, 0.3, 0.05, 0.05])  # per opcode
_RHO_HOT = 0.2  # relayout of a hot op's operand, in units of the hot op's base cost
_BACKGROUND = 0.003  # fraction of the other nodes that are configurable
_DOMINANT_SHARE = (0.28, 0.38)
_SECONDARY = (2, 5)  # 2-4 secondary hot ops
_SECONDARY_SHARE = (0.02, 0.08)
_MID_SHARE = (3e-4, 3e-3)
_DILUTION = 1.25  # the default's own layout penalties and copies on top of the base costs
_NOISE = 2.4e-4
_QUANTUM = 6e-7
_REVISIT = 0.05
_PICK_DOMINANT, _PICK_PRODUCER, _PICK_SECONDARY = 0.12, 0.04, 0.05
_DOMINANT_CLASS = (0.12, 0.36, 0.52)  # weights of classes 1, 2, 3 when the dominant op is mutated
_CHUNK = 64  # configurations per vectorized cost evaluation

__all__ = ["realistic_layout_graph", "runtime_profile"]


def _waste(dims: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """(n, 4) padding waste of every node under each layout class (minor-most to 128, second-minor to 8)."""
    n = dims.shape[0]
    d = dims.astype(np.float64)
    rows = np.arange(n)
    out = np.empty((n, 4))
    for k in range(4):
        dm, ds = (np.maximum(d[rows, np.maximum(_PERM[rank, k, j], 0)], 1.0) for j in (0, 1))
        out[:, k] = np.ceil(dm / 128) * 128 / dm * np.ceil(ds / 8) * 8 / ds
    return out


def _producers(v: int, g: Mapping[str, np.ndarray], hops: int = 2) -> list[int]:
    """The nodes that decide the layouts of ``v``'s operands: each operand's chain followed ``hops`` steps."""
    found = []
    for op in (g["op0"][v], g["op1"][v]):
        u = int(op)
        for _ in range(hops):
            if u < 0 or g["op0"][u] < 0 or g["opcode"][u] in (DOT, CONV, RESHAPE, TRANSPOSE):
                break
            u = int(g["op0"][u])
        if u >= 0:
            found.append(u)
    return found


def _hot_ops(g: dict[str, np.ndarray], rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """Pick the dominant and secondary hot ops (dot/convolution), rank 4, aligned in their native class."""
    cand = np.flatnonzero(np.isin(g["opcode"], (DOT, CONV)) & (g["op0"] >= 0))
    if cand.size < 2:
        cand = np.flatnonzero(g["op0"] >= 0)
    k = min(cand.size, int(rng.integers(*_SECONDARY)) + 1)
    hot = rng.choice(cand, size=k, replace=False)
    dom = int(hot[0])
    for v in hot:  # aligned in classes 0 and 1; class 2 (3) puts dim 0 minor-most (second-minor)
        g["opcode"][v] = DOT
        g["rank"][v] = 4
        first = 3 if v == dom else int(rng.choice([1, 2, 4, 7, 16, 28, 49, 100]))
        g["dims"][v] = [
            first,
            int(rng.choice([2, 4, 16])),
            128 * int(rng.integers(1, 3)),
            128 * int(rng.integers(1, 3)),
            0,
            0,
        ]
        g["layout"][v] = 0
    return dom, hot[1:].astype(np.int64)


def realistic_layout_graph(num_nodes: int, configs: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One SYNTHETIC layout graph with realistic runtimes, as the published ``.npz`` arrays (see module docs).

    Args:
        num_nodes: Number of nodes, >= 50.
        configs: Number of configurations, >= 2.
        rng: Random generator.

    Returns:
        dict[str, np.ndarray]: Layout arrays as :func:`synth_layout_graph` returns them.

    Raises:
        InvalidOption: For fewer than 50 nodes or 2 configurations.
    """
    if num_nodes < 50 or configs < 2:
        raise InvalidOption(f"a realistic synthetic layout graph needs >= 50 nodes and >= 2 configs, got "
                            f"{num_nodes} nodes, {configs} configs")  # fmt: skip
    g = _dag(num_nodes, rng)
    dom, secondary = _hot_ops(g, rng)
    elems = np.where(g["dims"] > 0, g["dims"], 1).prod(axis=1).astype(np.float64)
    opc = g["opcode"]
    base = np.where(np.isin(opc, (PARAM, 1)), 0.0, _OVERHEAD) + _work(opc, elems, g["kdim"].astype(float)) / _TPUT[opc]
    hot = np.r_[dom, secondary].astype(np.int64)
    # configurable: hot ops, the producers of their operands, and ~0.3% of the other layout-bearing nodes
    hot_prod = sorted({u for v in hot for u in _producers(int(v), g)} - set(hot.tolist()))
    bearing = np.isin(opc, (DOT, CONV, RESHAPE, TRANSPOSE, PARAM))
    background = np.flatnonzero(bearing & (rng.random(num_nodes) < _BACKGROUND / max(bearing.mean(), 1e-9)))
    background = np.setdiff1d(background, np.r_[hot, hot_prod])
    # heavy tail: mid-size background ops (0.03-1% of the runtime each), then the hot ops' shares of the total
    base[hot] = 0.0
    rest = base.sum()
    mid = background[opc[background] != PARAM]
    base[mid] = np.exp(rng.uniform(*np.log(_MID_SHARE), mid.size)) * rest
    shares = np.r_[rng.uniform(*_DOMINANT_SHARE), rng.uniform(*_SECONDARY_SHARE, secondary.size)]
    # contraction sizes follow from the costs, so node features (kdim, log2 work) show the heavy ops
    g["kdim"][mid] = np.maximum(1, np.rint(base[mid] * _TPUT[DOT] / (2.0 * elems[mid]))).astype(np.int64)
    opc[mid] = np.where(np.isin(opc[mid], (DOT, CONV)), opc[mid], DOT)
    kappa = _KAPPA[opc].copy()
    kappa[hot] = _KAPPA_HOT
    ids = np.unique(np.r_[hot, hot_prod, background]).astype(np.int64)
    own = np.zeros(num_nodes, bool)
    own[ids] = True
    anchor = _anchors(g["op0"], own)
    ei = _edges(g["op0"], g["op1"])
    log_waste = np.log2(_waste(g["dims"], g["rank"]))
    # the hot ops sized to their shares of the default's runtime, then the default with them
    default = g["layout"].copy()
    cost = _CostModel(g, ids, anchor, base[:, None] * (1.0 + kappa[:, None] * log_waste), base, elems, hot, ei)
    default[ids] = cost.local_optimum(default[ids])
    base[hot] = shares / (1.0 - shares.sum()) * float(cost(default[ids][None, :])[0])
    cost = _CostModel(g, ids, anchor, base[:, None] * (1.0 + kappa[:, None] * log_waste), base, elems, hot, ei)
    default[ids] = cost.local_optimum(default[ids])
    g["kdim"][hot] = np.maximum(1, np.rint(base[hot] * _TPUT[DOT] / (2.0 * elems[hot]))).astype(np.int64)
    cls = _mutations(ids, default, dom, hot, hot_prod, configs, rng)
    true = cost(cls)
    noisy = true * (1.0 + _NOISE * rng.standard_normal(configs))
    quantum = max(1.0, _QUANTUM * true[0])
    runtime = np.maximum(1, np.rint(noisy / quantum) * quantum).astype(np.int64)
    n_ops = np.bincount(ei[:, 0], minlength=num_nodes)
    n_users = np.bincount(ei[:, 1], minlength=num_nodes)
    return {
        "node_feat": _node_feat(g, n_ops, n_users, rng),
        "node_opcode": opc.astype(np.uint8),
        "edge_index": ei,
        "node_config_ids": ids,
        "node_config_feat": _config_feat(cls, ids, g["rank"], g["op0"], g["op1"]),
        "config_runtime": runtime,
    }


def _mutations(
    ids: np.ndarray,
    default: np.ndarray,
    dom: int,
    hot: np.ndarray,
    hot_prod: list[int],
    configs: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """(configs, nc) classes: the default, then mutations of it (and exact re-visits)."""
    pos = {int(v): j for j, v in enumerate(ids)}
    d = pos[dom]
    producers = [pos[u] for u in hot_prod if u in _near(dom, hot_prod)]
    secondary = [pos[int(v)] for v in hot[1:]] + [pos[u] for u in hot_prod if pos[u] not in producers]
    other = np.setdiff1d(np.arange(ids.size), np.r_[d, producers, secondary]).astype(np.int64)
    base = default[ids]
    cls = np.tile(base, (configs, 1))
    cuts = np.cumsum([_PICK_DOMINANT, _PICK_PRODUCER, _PICK_SECONDARY])
    for c in range(1, configs):
        if rng.random() < _REVISIT:
            cls[c] = cls[int(rng.integers(0, c))]
            continue
        for _ in range(1 + int(rng.poisson(1.0))):
            u = rng.random()
            if u < cuts[0]:
                cls[c, d] = (base[d] + int(rng.choice([1, 2, 3], p=_DOMINANT_CLASS))) % 4
                continue
            pool = producers if u < cuts[1] else secondary if u < cuts[2] else other
            pool = pool if len(pool) else other if len(other) else [d]
            j = int(rng.choice(pool))
            cls[c, j] = (base[j] + int(rng.integers(1, 4))) % 4
    return cls


def _near(dom: int, hot_prod: list[int]) -> set[int]:
    # producers are listed per hot op in order; the dominant's come first and lie before it
    return {u for u in hot_prod if u < dom and dom - u < 64}


class _CostModel:
    """True runtime (ns) of configurations: a constant part + the nodes and edges a configuration can change."""

    def __init__(
        self,
        g: Mapping[str, np.ndarray],
        ids: np.ndarray,
        anchor: np.ndarray,
        cost_cls: np.ndarray,
        base: np.ndarray,
        elems: np.ndarray,
        hot: np.ndarray,
        ei: np.ndarray,
    ) -> None:
        n = anchor.shape[0]
        rank = g["rank"]
        cons, prod = ei[:, 0], ei[:, 1]
        is_cfg = np.zeros(n, bool)
        is_cfg[ids] = True
        moved = (anchor >= 0) & is_cfg[np.maximum(anchor, 0)]  # nodes whose class follows a configurable node
        native = _CANON[rank, np.where(anchor >= 0, g["layout"][np.maximum(anchor, 0)], g["layout"])]
        fixed = np.where(moved, -1, native)
        first = np.unique(cons, return_index=True)[1]
        inherit = np.zeros(cons.shape[0], bool)
        inherit[first] = ~is_cfg[cons[first]]
        is_hot = np.zeros(n, bool)
        is_hot[hot] = True
        copy = np.where(is_hot[cons], _RHO_HOT * base[cons], _OVERHEAD + elems[prod] / 200.0)
        live = ~inherit & (moved[cons] | moved[prod])
        const_edges = ~inherit & ~live & (fixed[prod] != fixed[cons])
        self.const = cost_cls[~moved, fixed[~moved]].sum() + copy[const_edges].sum()
        self.mv = np.flatnonzero(moved)
        local = np.full(n, -1, np.int64)
        local[self.mv] = np.arange(self.mv.size)
        col = np.full(n, -1, np.int64)
        col[ids] = np.arange(ids.size)
        self.anchor_col = col[anchor[self.mv]]
        self.rank_mv = rank[self.mv]
        self.cost_mv = cost_cls[self.mv]
        e_live = np.flatnonzero(live)
        self.copy = copy[e_live]
        self.sides = [(moved[v], np.maximum(local[v], 0), fixed[v]) for v in (prod[e_live], cons[e_live])]

    def __call__(self, cls: np.ndarray) -> np.ndarray:
        """Runtime of each row of ``cls`` (configs, nc) of configurable-node classes."""
        out = np.empty(cls.shape[0])
        rows = np.arange(self.mv.size)[None, :]
        for c0 in range(0, cls.shape[0], _CHUNK):
            ch = cls[c0 : c0 + _CHUNK]
            lc = _CANON[self.rank_mv[None, :], ch[:, self.anchor_col]]  # (chunk, moved) class of every moved node
            node = self.cost_mv[rows, lc].sum(axis=1)
            (pm, pl, pf), (cm, cl, cf) = self.sides
            mism = np.where(pm, lc[:, pl], pf) != np.where(cm, lc[:, cl], cf)
            out[c0 : c0 + _CHUNK] = self.const + node + (mism * self.copy[None, :]).sum(axis=1)
        return out

    def local_optimum(self, start: np.ndarray, sweeps: int = 2) -> np.ndarray:
        """The compiler's default: coordinate descent over the configurable nodes' classes from ``start``."""
        cur = start.copy()
        for _ in range(sweeps):
            for j in range(cur.size):
                trial = np.tile(cur, (4, 1))
                trial[:, j] = np.arange(4)
                cur[j] = int(np.argmin(self(trial) - 1e-6 * (np.arange(4) == cur[j])))
        return cur


def runtime_profile(runtime: np.ndarray, features: np.ndarray | None = None) -> dict[str, float]:
    """The statistics issue 15 measured on real runtimes, for one graph's ``config_runtime``.

    ``within_1pct``: fraction within 1% of the fastest; ``near_2_3x`` / ``near_5_4x``: fractions with runtime /
    fastest in [1.9, 2.8] / [4.4, 6.6]; ``tied``: fraction sharing their exact runtime with another configuration;
    ``duplicate_median_diff``: median relative difference between configurations with identical ``features``
    (``(c, ...)``, e.g. ``node_config_feat``), NaN without duplicates or features.

    Args:
        runtime: Runtime of every configuration, > 0.
        features: Configuration features whose duplicates are compared (None: ``duplicate_median_diff`` is NaN).

    Returns:
        dict[str, float]: ``within_1pct``, ``near_2_3x``, ``near_5_4x``, ``tied`` and ``duplicate_median_diff``.

    Shapes:
        runtime: (num_configs,) float
        features: (num_configs, ...) float
    """
    rt = np.asarray(runtime, dtype=np.float64)
    ratio = rt / rt.min()
    _, inv, counts = np.unique(rt, return_inverse=True, return_counts=True)
    out = {
        "within_1pct": float((ratio <= 1.01).mean()),
        "near_2_3x": float(((ratio >= 1.9) & (ratio <= 2.8)).mean()),
        "near_5_4x": float(((ratio >= 4.4) & (ratio <= 6.6)).mean()),
        "tied": float((counts[inv] > 1).mean()),
        "duplicate_median_diff": float("nan"),
    }
    if features is not None:
        flat = np.asarray(features).reshape(rt.size, -1)
        _, group = np.unique(flat, axis=0, return_inverse=True)
        diffs = []
        for gid in np.flatnonzero(np.bincount(group.reshape(-1)) > 1):
            r = rt[group.reshape(-1) == gid]
            diffs += list(np.abs(r[1:] - r[0]) / r[0])
        if diffs:
            out["duplicate_median_diff"] = float(np.median(diffs))
    return out
