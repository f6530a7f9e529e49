"""GiPH's gpNet: the graph of feasible (task, device) pairs a placement policy scores to pick one relocation.

Nodes are the feasible (task, device) pairs, numbered row-major (by task, then device). The pair
``(t, placement[t])`` is ``t``'s *pivot*. For every task edge ``p -> t`` there is an edge from ``p``'s pivot to
every candidate ``(t, d)`` (``t``'s pivot included), and from every non-pivot candidate ``(p, d)`` to ``t``'s
pivot. Every gpNet edge therefore joins a task to one of its consumers and goes from a lower task level to a
strictly higher one, so message passing can run in level order. Edge order: the pivot -> candidate edges
(grouped by candidate node), then the candidate -> pivot edges (grouped by task edge); ``task``/``device`` are
read-only arrays shared by every gpNet of one builder.

Node features (:data:`NODE_FEATURES`) of ``(t, d)``:

* ``compute``: ``compute[t]``; ``speed``: ``speed[d]``; ``compute_time``: ``compute[t] / speed[d]``.
* ``start_potential``: ``est(t on d) - start[t]``, where ``est(t on d) = max_p finish[p] + comm(placement[p] -> d)``
  over ``t``'s parents (0 for a source, comm 0 on one device). Negative = ``t`` could start earlier on ``d``;
  a pivot's value is ``ready[t] - start[t]`` (0 unless ``t`` waited for its device).
* ``critical``: 1.0 if ``t`` is on the schedule's critical path, else 0.0.
* ``finish_potential``: ``est(t on d) + compute[t] / speed[d] - finish[t]`` (our addition to GiPH's five): the
  change of ``t``'s own finish time if it moved to ``d``, ignoring queueing; negative = it would finish earlier.

Edge features (:data:`EDGE_FEATURES`) of an edge between ``(u, du)`` and ``(v, dv)`` for task edge ``u -> v``:
``bytes``; ``delay[du, dv]``; ``inv_bandwidth[du, dv]`` (1/bandwidth, finite; 0 on one device);
``comm_time = delay + bytes * inv_bandwidth`` (0 on one device); ``critical`` = 1.0 if ``u`` and ``v`` are
consecutive on the critical path.

Scaling, per gpNet: every column is min-max scaled to [0, 1] (a constant column becomes 0); the heavy-tailed
magnitudes (``compute``, ``compute_time``, ``bytes``, ``comm_time``) get ``log1p`` first. The two potentials are
signed and divided by their largest absolute value instead, to [-1, 1] (sign and zero preserved). The two
``critical`` flags are already 0/1 and are left as they are (min-max would erase an all-critical column).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mlsysopt.errors import ConstraintViolation, InvalidPlacement
from mlsysopt.graph.cluster import DeviceCluster
from mlsysopt.graph.ir import CompGraph
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.graph.simulator import Schedule

NODE_FEATURES: tuple[str, ...] = (
    "compute",
    "speed",
    "compute_time",
    "start_potential",
    "critical",
    "finish_potential",
)
EDGE_FEATURES: tuple[str, ...] = ("bytes", "delay", "inv_bandwidth", "comm_time", "critical")
NODE_DIM = len(NODE_FEATURES)
EDGE_DIM = len(EDGE_FEATURES)


@dataclass
class GpNet:
    """One gpNet: node/edge features as tensors plus the (task, device) identity of every node.

    Built by :meth:`GpNetBuilder.build`; ``N`` is the number of feasible (task, device) pairs, ``E`` of gpNet edges.

    Args:
        x: Scaled node features (:data:`NODE_FEATURES`).
        edge_index: Source and target gpNet node of every edge.
        edge_attr: Scaled edge features (:data:`EDGE_FEATURES`).
        task: Task of each node.
        device: Device of each node.
        pivot: Whether the node is its task's current placement.
        level: Task level of each node; every edge goes to a strictly higher level.
        action_mask: Selectable nodes (the non-pivots, or the pivots when there are none).
        num_tasks: Tasks of the graph.
        num_devices: Devices of the cluster.

    Shapes:
        x: (N, NODE_DIM) float32
        edge_index: (2, E) long
        edge_attr: (E, EDGE_DIM) float32
        task, device: (N,) int64
        pivot: (N,) bool
        level: (N,) long
        action_mask: (N,) bool
    """

    x: torch.Tensor  # float32 (N, NODE_DIM)
    edge_index: torch.Tensor  # long (2, E)
    edge_attr: torch.Tensor  # float32 (E, EDGE_DIM)
    task: np.ndarray  # int64 (N,) task of each node
    device: np.ndarray  # int64 (N,) device of each node
    pivot: np.ndarray  # bool (N,) node is its task's current placement
    level: torch.Tensor  # long (N,) task level; every edge goes to a strictly higher level
    action_mask: torch.Tensor  # bool (N,) selectable nodes (non-pivots, or pivots when there are none)
    num_tasks: int
    num_devices: int

    @property
    def num_nodes(self) -> int:
        """Number of gpNet nodes (feasible pairs)."""
        return int(self.task.shape[0])

    @property
    def num_edges(self) -> int:
        """Number of gpNet edges."""
        return int(self.edge_index.shape[1])


def _offsets(counts: np.ndarray) -> np.ndarray:
    """``concat(arange(c) for c in counts)``, vectorized."""
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def _minmax(x: np.ndarray) -> np.ndarray:
    """Column-wise min-max to [0, 1] over the rows of ``x``; constant (or empty) columns become 0."""
    if x.shape[0] == 0:
        return x
    lo = x.min(axis=0)
    span = x.max(axis=0) - lo
    safe = np.where(span > 0, span, 1.0)
    return np.where(span > 0, (x - lo) / safe, 0.0)


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class GpNetBuilder:
    """Static gpNet structure of one placement problem; :meth:`build` adds a placement and its schedule.

    Takes a :class:`~mlsysopt.graph.problem.PlacementProblem`, or a (graph, cluster) pair to build one from.

    Args:
        problem: The placement problem, or a graph (then give ``cluster``).
        cluster: The devices, when ``problem`` is a graph; None otherwise.

    Raises:
        ConstraintViolation: If some task can run on no device.
    """

    def __init__(self, problem: PlacementProblem | CompGraph, cluster: DeviceCluster | None = None) -> None:
        problem = PlacementProblem.of(problem, cluster)
        self.problem = problem
        graph, cluster = self.graph, self.cluster = problem.graph, problem.cluster
        n, nd = graph.num_nodes, cluster.num_devices
        feas = problem.mask  # every task has a candidate (checked by the problem)
        self.num_tasks, self.num_devices = n, nd
        task, device = (v.astype(np.int64) for v in np.nonzero(feas))  # row-major: grouped by task
        nn = task.size
        self.task, self.device = _readonly(task), _readonly(device)
        self._node_id = np.full((n, nd), -1, np.int64)
        self._node_id[task, device] = np.arange(nn)
        ncand = feas.sum(axis=1).astype(np.int64)
        self.cand_ptr = np.zeros(n + 1, np.int64)  # candidates of task t: nodes cand_ptr[t]:cand_ptr[t+1]
        np.cumsum(ncand, out=self.cand_ptr[1:])
        self._level_np = graph.levels[task].astype(np.int64)

        src, dst = graph.edge_index
        nbytes = graph.edge_bytes
        # log1p(bytes) min-maxed over the task edges: every task edge has an A edge, so this is per gpNet too
        bytes_scaled = _minmax(np.log1p(nbytes)[:, None])[:, 0]
        # A edges: parent pivot -> every candidate of the consumer, grouped by the candidate (for reduceat).
        pptr, _, peid = graph.parents_csr
        cnt = (pptr[1:] - pptr[:-1])[task]
        a_dst = np.repeat(np.arange(nn, dtype=np.int64), cnt)
        a_edge = peid[pptr[task[a_dst]] + _offsets(cnt)]
        self._a_dst, self._a_dev, self._a_src_task = a_dst, device[a_dst], src[a_edge]
        self._est_nodes = np.flatnonzero(cnt > 0)  # nodes whose task has parents
        self._est_starts = (np.cumsum(cnt) - cnt)[self._est_nodes]
        # B edges: the j-th non-pivot candidate of the producer -> consumer pivot. With the producer's pivot at
        # position q among its candidates, that candidate is node cand_ptr[producer] + j + (j >= q).
        cnt_b = ncand[src] - 1
        b_edge = np.repeat(np.arange(src.size, dtype=np.int64), cnt_b)
        self._b_rank = _offsets(cnt_b)
        self._b_base = self.cand_ptr[src[b_edge]] + self._b_rank
        self._b_src_task, self._b_dst_task = src[b_edge], dst[b_edge]
        # every gpNet edge, A then B: its task edge, bytes and scaled bytes are static
        self._edge = np.concatenate([a_edge, b_edge])
        self._bytes = nbytes[self._edge]
        self._bytes_scaled = bytes_scaled[self._edge].astype(np.float32)
        self._src_task, self._dst_task = src, dst
        self._dev_row = device * nd  # flat row offset into the (D, D) link matrices
        self._delay = np.ascontiguousarray(cluster.delay).ravel()
        self._inv_bw = np.ascontiguousarray(cluster.inv_bandwidth).ravel()
        # static node columns, already scaled
        comp = graph.compute[task]
        speed = cluster.speed[device]
        self._compute_time = comp / speed + cluster.overhead[device]
        self._x_static = _minmax(np.stack([np.log1p(comp), speed, np.log1p(self._compute_time)], axis=1))

    @property
    def num_nodes(self) -> int:
        """Number of gpNet nodes (feasible (task, device) pairs)."""
        return int(self.task.size)

    def node_of(self, task: int, device: int) -> int:
        """gpNet node id of the pair (task, device); ConstraintViolation if the pair is infeasible."""
        if not (0 <= task < self.num_tasks and 0 <= device < self.num_devices):
            raise InvalidPlacement(f"no pair (task {task}, device {device}) in a {self.num_tasks}x{self.num_devices}")
        k = int(self._node_id[task, device])
        if k < 0:
            raise ConstraintViolation(f"task {task} cannot run on device {device} (hardware type)")
        return k

    def move(self, action_node: int) -> tuple[int, int]:
        """The relocation a gpNet node stands for: (task, device)."""
        return int(self.task[action_node]), int(self.device[action_node])

    def candidates(self, task: int) -> np.ndarray:
        """gpNet node ids of every feasible device of ``task``."""
        return np.arange(self.cand_ptr[task], self.cand_ptr[task + 1])

    def pivots(self, placement: Any) -> np.ndarray:
        """Pivot node id of every task under ``placement``; raises on an infeasible or malformed placement."""
        p = np.asarray(placement)
        if p.shape != (self.num_tasks,) or not np.issubdtype(p.dtype, np.integer):
            raise InvalidPlacement(f"placement must be {self.num_tasks} integer device ids, got shape {p.shape}")
        if p.min() < 0 or p.max() >= self.num_devices:
            raise InvalidPlacement(f"placement uses a device outside 0..{self.num_devices - 1}")
        piv = self._node_id[np.arange(self.num_tasks), p]
        if (piv < 0).any():
            t = int(np.flatnonzero(piv < 0)[0])
            raise ConstraintViolation(f"task {t} is placed on device {int(p[t])}, which does not support its type")
        return piv

    def build(self, placement: Any, schedule: Schedule) -> GpNet:
        """The gpNet of ``placement`` given its simulated ``schedule`` (vectorized; no per-node Python loop)."""
        piv = self.pivots(placement)
        pl = np.asarray(placement, np.int64)
        if not np.array_equal(schedule.placement, pl):
            raise InvalidPlacement("the schedule was simulated for a different placement")
        nn, nd = self.num_nodes, self.num_devices
        is_pivot = np.zeros(nn, bool)
        is_pivot[piv] = True
        cp = np.asarray(schedule.critical_path, np.int64)
        pos = np.full(self.num_tasks, -2, np.int64)  # -2: off the path (never "consecutive" with another -2)
        pos[cp] = np.arange(cp.size)

        b_src = self._b_base + (self._b_rank >= (piv - self.cand_ptr[:-1])[self._b_src_task])
        na, e = self._a_dst.size, self._edge.size
        edge_index = np.empty((2, e), np.int64)
        edge_index[0, :na] = piv[self._a_src_task]
        edge_index[0, na:] = b_src
        edge_index[1, :na] = self._a_dst
        edge_index[1, na:] = piv[self._b_dst_task]

        # per-edge device pairs -> delay, 1/bandwidth, comm time
        flat = np.empty(e, np.int64)
        flat[:na] = (pl * nd)[self._a_src_task] + self._a_dev
        flat[na:] = self._dev_row[b_src] + pl[self._b_dst_task]
        feat = np.empty((3, e))
        feat[0] = self._delay[flat]
        feat[1] = self._inv_bw[flat]
        np.multiply(self._bytes, feat[1], out=feat[2])
        feat[2] += feat[0]

        # est(t on d): latest arrival over the A edges into (t, d)
        est = np.zeros(nn)
        if self._est_nodes.size:
            arrive = schedule.finish[self._a_src_task] + feat[2, :na]
            est[self._est_nodes] = np.maximum.reduceat(arrive, self._est_starts)
        potential = _signed_scale(est - schedule.start[self.task])
        finish_potential = _signed_scale(est + self._compute_time - schedule.finish[self.task])

        np.log1p(feat[2], out=feat[2])
        if e:
            lo = feat.min(axis=1, keepdims=True)
            span = feat.max(axis=1, keepdims=True) - lo
            feat -= lo
            feat *= np.divide(1.0, span, out=np.zeros_like(span), where=span > 0)
        src, dst = self._src_task, self._dst_task
        crit = pos[dst] == pos[src] + 1
        edge_attr = np.empty((e, EDGE_DIM), np.float32)
        edge_attr[:, 0] = self._bytes_scaled
        edge_attr[:, 1:4] = feat.T
        edge_attr[:, 4] = crit[self._edge]

        x = np.empty((nn, NODE_DIM), np.float32)
        x[:, :3] = self._x_static
        x[:, 3] = potential
        x[:, 4] = pos[self.task] >= 0
        x[:, 5] = finish_potential
        mask = ~is_pivot if nn > self.num_tasks else is_pivot
        return GpNet(
            x=torch.from_numpy(x),
            edge_index=torch.from_numpy(edge_index),
            edge_attr=torch.from_numpy(edge_attr),
            task=self.task,
            device=self.device,
            pivot=is_pivot,
            level=torch.from_numpy(self._level_np.copy()),
            action_mask=torch.from_numpy(mask),
            num_tasks=self.num_tasks,
            num_devices=self.num_devices,
        )


def _signed_scale(values: np.ndarray) -> np.ndarray:
    """Divide by the largest absolute value (to [-1, 1]; sign and zero preserved)."""
    scale = np.abs(values).max(initial=0.0)
    return values / scale if scale > 0 else values
