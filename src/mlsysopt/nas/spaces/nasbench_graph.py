"""NAS-Bench-Graph as a search space: GNN cells looked up in the tables the ``nas-bench-graph`` package ships.

A NAS-Bench-Graph cell has 4 computing nodes; ``link`` (one of 9 patterns) says which earlier node (0 = the
cell input) feeds each node, and each node applies one op (``gat gcn gin cheb sage arma graph fc skip``;
proteins: ``gcn sage arma fc skip``). The table is keyed by ``nas_bench_graph.Arch(link, ops).valid_hash()``,
which maps every (link, ops) combination to its canonical isomorphism class (26,206 entries; proteins 2,021);
only an all-``skip`` cell is missing.

Progression: with ``b`` blocks the decisions are ``[link, op1, ..., opb]`` and computing nodes ``b+1..4`` are
``skip``; so ``b`` is how many nodes may compute, and ``decisions(b)`` is a prefix of ``decisions(b + 1)``.
Every such cell is in the table (distinct cells: 24, 380, 3,124, 26,206 for b = 1..4 on the 9-op datasets)
except the all-``skip`` one, which :meth:`SearchSpace.check` rejects. :meth:`encode` pads missing op decisions with
the ``skip`` one-hot, so the same cell encodes the same at every ``b``.

Loading: :func:`nas_bench_graph.light_read` unpickles ``<package>/light/<dataset>.bench``. Only those packaged
table files are ever unpickled, never a user path: the dataset name is checked against :data:`DATASETS` first.
Tables are cached per process (loading one takes ~0.03-0.1 s).
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import InvalidArchitecture, InvalidDataset, MlsysoptError
from mlsysopt.io import load_torch, save_torch_atomic
from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace

if TYPE_CHECKING:
    from mlsysopt.nas.prior import PriorConfig, TaskRecords, TransferPrior

DATASETS: tuple[str, ...] = ("cora", "citeseer", "pubmed", "cs", "physics", "photo", "computers", "arxiv", "proteins")
N_NODES = 4

_TABLES: dict[str, dict[int, dict[str, Any]]] = {}
_LOAD_S: dict[str, float] = {}
_REPRESENTATIVES: dict[tuple[str, int], dict[int, Arch]] = {}
_KEYS: dict[tuple[str, ...], dict[Arch, int]] = {}  # op list -> {arch: valid_hash}; at most ~33k entries each


def load_table(dataset: str) -> dict[int, dict[str, Any]]:
    """The packaged table of ``dataset`` (``{valid_hash: {valid_perf, perf, latency, para}}``), cached per process."""
    if dataset not in DATASETS:
        raise InvalidDataset(f"unknown NAS-Bench-Graph dataset '{dataset}' (choose from: {', '.join(DATASETS)})")
    if dataset not in _TABLES:
        import nas_bench_graph  # deferred: nas_bench_graph is optional

        t0 = time.perf_counter()
        _TABLES[dataset] = nas_bench_graph.light_read(dataset)
        _LOAD_S[dataset] = time.perf_counter() - t0
    return _TABLES[dataset]


def _resources(entry: dict[str, Any]) -> dict[str, float]:
    return {"params": float(round(float(entry["para"]) * 1e6)), "latency_ms": float(entry["latency"]) * 1000.0}


class NasBenchGraphSpace(SearchSpace):
    """GNN cells of NAS-Bench-Graph on one dataset; evaluation is a table look-up (valid perf; test reported).

    Args:
        dataset: NAS-Bench-Graph dataset: ``cora``, ``citeseer``, ``pubmed``, ``cs``, ``physics``, ``photo``,
            ``computers``, ``arxiv`` or ``proteins``.

    Raises:
        InvalidDataset: For an unknown dataset.
    """

    min_blocks = 1
    max_blocks = N_NODES
    nested_blocks = True  # a cell of b < 4 blocks is a 4-block cell whose other nodes are skip (see :meth:`cell`)
    resource_names = ("params", "latency_ms")
    head_names = ("link",)
    block_names = ("op{i}",)

    def __init__(self, dataset: str = "cora") -> None:
        import nas_bench_graph  # deferred: nas_bench_graph is optional

        if dataset not in DATASETS:
            raise InvalidDataset(f"unknown NAS-Bench-Graph dataset '{dataset}' (choose from: {', '.join(DATASETS)})")
        self.dataset = dataset
        self.name = f"nasbench-graph:{dataset}"
        self.links: tuple[tuple[int, ...], ...] = tuple(tuple(lk) for lk in nas_bench_graph.link_list)
        ops = nas_bench_graph.gnn_list_proteins if dataset == "proteins" else nas_bench_graph.gnn_list
        self.ops: tuple[str, ...] = tuple(ops)
        self.head_options = (len(self.links),)
        self.block_options = (len(self.ops),)
        self._skip = self.ops.index("skip")
        self._keys = _KEYS.setdefault(self.ops, {})

    def option_labels(self, blocks: int) -> list[list[Any]]:
        """The link patterns (as text, e.g. ``"[0, 1, 2, 3]"``) and the op names of every node."""
        return [[str(list(lk)) for lk in self.links]] + [list(self.ops)] * (len(self.decisions(blocks)) - 1)

    # ------------------------------------------------------------------ table
    @property
    def table(self) -> dict[int, dict[str, Any]]:
        """The raw table (loaded on first use in each process; never pickled with the space)."""
        return load_table(self.dataset)

    @property
    def load_seconds(self) -> float:
        """Seconds this process spent unpickling the table."""
        load_table(self.dataset)
        return _LOAD_S[self.dataset]

    def cell(self, arch: Arch) -> tuple[list[int], list[str]]:
        """``(link, ops)`` of the full 4-node cell; nodes beyond ``arch.blocks`` are ``skip``."""
        link = list(self.links[arch.choices[0]])
        ops = [self.ops[c] for c in arch.choices[1:]] + ["skip"] * (N_NODES - arch.blocks)
        return link, ops

    def _key(self, arch: Arch) -> int:
        """``valid_hash`` of the cell (~85 us), memoised per op list and architecture for the whole process."""
        key = self._keys.get(arch)
        if key is None:
            import nas_bench_graph  # deferred: nas_bench_graph is optional

            link, ops = self.cell(arch)
            key = self._keys[arch] = int(nas_bench_graph.Arch(link, ops).valid_hash())
        return key

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the configuration only: the memoised keys are process-wide (see :data:`_KEYS`)."""
        return {k: v for k, v in self.__dict__.items() if k != "_keys"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`__getstate__` (re-attaches this process's key memo)."""
        self.__dict__.update(state)
        self._keys = _KEYS.setdefault(self.ops, {})

    def key(self, arch: Arch) -> int:
        """The table key (``valid_hash``) of ``arch``."""
        self.check(arch)
        return self._key(arch)

    def entry(self, arch: Arch) -> dict[str, Any]:
        """The raw table entry of ``arch``."""
        return self.table[self.key(arch)]

    def _check_semantics(self, arch: Arch) -> None:
        if self._key(arch) not in self.table:
            link, ops = self.cell(arch)
            why = " (every computing node is skip)" if all(o == "skip" for o in ops) else ""
            raise InvalidArchitecture(f"{self.name}: cell link={link} ops={ops} is not in the table{why}")

    def _pad_choice(self, index: int) -> int | None:
        return self._skip if index >= len(self.head_options) else None

    # ------------------------------------------------------------------ names
    def decode(self, arch: Arch) -> dict[str, Any]:
        """``{"link", "ops", "blocks", "key"}`` of the full cell."""
        self.check(arch)
        link, ops = self.cell(arch)
        return {"space": self.name, "link": link, "ops": ops, "blocks": arch.blocks, "key": self._key(arch)}

    def arch_from_names(self, link: Sequence[int], ops: Sequence[str]) -> Arch:
        """The Arch with this link pattern and ops for nodes ``1..len(ops)`` (the rest ``skip``)."""
        lk = tuple(int(v) for v in link)
        if lk not in self.links:
            choices = ", ".join(str(list(x)) for x in self.links)
            raise InvalidArchitecture(f"{self.name}: unknown link {list(link)} (choose from: {choices})")
        unknown = [o for o in ops if o not in self.ops]
        if unknown:
            raise InvalidArchitecture(f"{self.name}: unknown op(s) {unknown} (choose from: {', '.join(self.ops)})")
        arch = Arch((self.links.index(lk), *(self.ops.index(o) for o in ops)), len(ops))
        self.check(arch)
        return arch

    # ------------------------------------------------------------------ resources and evaluation
    def resources(self, arch: Arch) -> dict[str, float]:
        """``{"params": count, "latency_ms": ms}`` from the table (NAS-Bench-Graph measured them)."""
        return _resources(self.entry(arch))

    def evaluate(self, arch: Arch, seed: int = 0) -> Evaluation:
        """Table look-up: perf = valid_perf, test_perf = perf; ``seed`` is ignored (one entry per cell)."""
        t0 = time.perf_counter()
        key = self.key(arch)
        e = self.table[key]
        ev = Evaluation(arch, float(e["valid_perf"]), float(e["perf"]), _resources(e), 0.0, extra={"key": key})
        ev.cost_s = time.perf_counter() - t0
        return ev

    def default_prior(self, config: Any = None) -> Any:
        """The transfer prior for this dataset: pretrained on every *other* NAS-Bench-Graph table (leave one out)."""
        return leave_one_out(self.dataset, config)

    def prior_tasks(self, config: Any = None) -> Any:
        """The source tasks of :meth:`default_prior` (to train one prior on them and on earlier runs' records)."""
        return leave_one_out_tasks(self.dataset, config)

    # ------------------------------------------------------------------ whole-table views
    def table_stats(self) -> dict[str, float]:
        """Size of the table and the median latency (ms) and params over it."""
        values = list(self.table.values())
        return {
            "n_archs": float(len(values)),
            "median_latency_ms": float(np.median([float(e["latency"]) for e in values]) * 1000.0),
            "median_params": float(np.median([float(e["para"]) for e in values]) * 1e6),
            "load_s": self.load_seconds,
        }

    def _best_key(self, feasible: Callable[[dict[str, float]], bool]) -> int | None:
        best_key, best = None, -np.inf
        for key, e in self.table.items():
            if float(e["perf"]) > best and feasible(_resources(e)):
                best_key, best = key, float(e["perf"])
        return best_key

    def best_feasible(self, feasible: Callable[[dict[str, float]], bool]) -> Evaluation | None:
        """The table cell with the best test perf among those whose resources satisfy ``feasible`` (None if none)."""
        key = self._best_key(feasible)
        if key is None:
            return None
        e = self.table[key]
        arch = self._representatives(self.max_blocks)[key]
        return Evaluation(arch, float(e["valid_perf"]), float(e["perf"]), _resources(e), 0.0, extra={"key": key})

    def best_feasible_test(self, feasible: Callable[[dict[str, float]], bool]) -> float | None:
        """Best test performance over every table cell whose resources satisfy ``feasible`` (for regret)."""
        key = self._best_key(feasible)
        return None if key is None else float(self.table[key]["perf"])

    def iter_archs(self, blocks: int | None = None) -> Iterator[Arch]:
        """Every distinct table cell reachable with ``blocks`` blocks (default 4: the whole table), once each."""
        yield from self._representatives(self.max_blocks if blocks is None else blocks).values()

    def _representatives(self, blocks: int) -> dict[int, Arch]:
        """``{key: first Arch in link x ops order with that key}`` for ``blocks`` blocks (~0.8 s at 4, cached)."""
        self._check_blocks(blocks)
        cache_key = (self.dataset, blocks)
        if cache_key not in _REPRESENTATIVES:
            import nas_bench_graph  # deferred: nas_bench_graph is optional

            table, reps = self.table, {}
            for li, lk in enumerate(self.links):
                for ops in itertools.product(range(len(self.ops)), repeat=blocks):
                    names = [self.ops[o] for o in ops] + ["skip"] * (N_NODES - blocks)
                    key = int(nas_bench_graph.Arch(list(lk), names).valid_hash())
                    if key in table and key not in reps:
                        reps[key] = Arch((li, *ops), blocks)
            _REPRESENTATIVES[cache_key] = reps
        return _REPRESENTATIVES[cache_key]


# ---------------------------------------------------------------------------- transfer between the tables
def table_records(dataset: str, rng: np.random.Generator | None = None, n: int | None = None) -> TaskRecords:
    """A NAS-Bench-Graph table as one task's records: every distinct cell (or ``n`` random (link, ops) variants of
    cells, which also teaches the prior that isomorphic cells perform alike)."""
    from mlsysopt.nas.prior import TaskRecords  # deferred: mlsysopt.nas.prior imports torch

    space = NasBenchGraphSpace(dataset)
    table = space.table
    if n is None:
        archs = list(space.iter_archs())
    else:
        rng = rng or np.random.default_rng(0)
        combos = len(space.links) * len(space.ops) ** N_NODES
        pick = rng.choice(combos, min(n, combos), replace=False)
        dims = [len(space.links)] + [len(space.ops)] * N_NODES
        archs = [Arch(tuple(int(c) for c in np.unravel_index(int(p), dims)), N_NODES) for p in pick]
        archs = [a for a in archs if space.is_valid(a)]
    decoded = [space.decode(a) for a in archs]
    perf = np.array([float(table[d["key"]]["valid_perf"]) for d in decoded])
    return TaskRecords(space.name, decoded, perf)


_LOO_CACHE: dict[tuple[str, tuple[Any, ...]], TransferPrior] = {}  # leave-one-out priors of this process
#: A folder where processes of one machine share the leave-one-out priors they fit (unset: each fits its own).
PRIOR_CACHE_ENV = "MLSYSOPT_PRIOR_CACHE"


def leave_one_out_tasks(target: str, config: PriorConfig | None = None) -> list[TaskRecords]:
    """The source tasks of :func:`leave_one_out`: every NAS-Bench-Graph table but ``target``'s, as records."""
    from mlsysopt.nas.prior import PriorConfig  # deferred: mlsysopt.nas.prior imports torch

    if target not in DATASETS:
        raise MlsysoptError(f"unknown NAS-Bench-Graph dataset '{target}' (choose from: {', '.join(DATASETS)})")
    cfg = config or PriorConfig()
    rng = np.random.default_rng(cfg.seed)
    return [table_records(d, rng, cfg.per_task) for d in DATASETS if d != target]


def leave_one_out(target: str, config: PriorConfig | None = None) -> TransferPrior:
    """The prior for NAS-Bench-Graph dataset ``target`` from the *other* datasets' tables (cached per process).

    Args:
        target: The NAS-Bench-Graph dataset the prior is for (its own table is left out).
        config: How the prior is trained (None: :class:`PriorConfig` defaults).

    Returns:
        TransferPrior: The fitted prior over the other eight datasets.

    Raises:
        MlsysoptError: For an unknown dataset.
    """
    from mlsysopt.nas.prior import PriorConfig  # deferred: mlsysopt.nas.prior imports torch

    cfg = config or PriorConfig()
    key = (target, tuple(asdict(cfg).values()))
    if key not in _LOO_CACHE:
        _LOO_CACHE[key] = _shared_prior(target, cfg, key)
    return _LOO_CACHE[key]


def _shared_prior(target: str, cfg: PriorConfig, key: tuple[Any, ...]) -> TransferPrior:
    """Fit the prior, or read it from ``$MLSYSOPT_PRIOR_CACHE`` when another process of this machine fitted it with
    the same settings (the folder is the caller's: a test session's, a benchmark's; one process fits at a time)."""
    from mlsysopt.nas.prior import TransferPrior  # deferred: mlsysopt.nas.prior imports torch

    folder = os.environ.get(PRIOR_CACHE_ENV)
    if not folder:
        return TransferPrior(cfg).fit(leave_one_out_tasks(target, cfg))
    Path(folder).mkdir(parents=True, exist_ok=True)
    path = Path(folder) / f"{target}-{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}.pt"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first process fits it, the others wait and read
        if path.is_file():
            return TransferPrior.from_state_dict(load_torch(path, MlsysoptError))
        prior = TransferPrior(cfg).fit(leave_one_out_tasks(target, cfg))
        save_torch_atomic(path, prior.state_dict())
        return prior


def register_prior(target: str, prior: TransferPrior, config: PriorConfig | None = None) -> None:
    """Put an already trained leave-one-out prior in this process's cache (a benchmark's workers load one file)."""
    from mlsysopt.nas.prior import PriorConfig  # deferred: mlsysopt.nas.prior imports torch

    cfg = config or PriorConfig()
    _LOO_CACHE[(target, tuple(asdict(cfg).values()))] = prior
