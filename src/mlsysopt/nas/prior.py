"""Transfer prior: a performance predictor pretrained on *other* tasks' evaluations, read as history records.

What carries across tasks in NAS is which architectures tend to do well. A :class:`TransferPrior` learns that from
history records -- the per-evaluation dicts a ``nas search`` run folder's ``result.json["evaluations"]`` holds
(:func:`mlsysopt.nas.report.eval_record`), or a whole NAS-Bench-Graph table turned into such records
(:func:`table_records`) -- and scores a new task's architectures before a single one is evaluated there.

* **Features** are the decoded architectures (``space.decode``) flattened into ``path=value`` tokens (``ops[2]=gcn``,
  ``link[1]=0``, ``blocks[0].width=32``, ``lr=0.01``), one-hot over the tokens seen in the records: two spaces that
  name their choices alike (NAS-Bench-Graph on any dataset; a user's space and its earlier runs) share features
  even when their option lists differ (proteins has 5 of the 9 GNN ops).
* **Targets** are each task's validation performance turned into normal scores (the rank within the task mapped
  through the inverse normal CDF), so tasks of different accuracy ranges, and a few failed outliers, weigh alike.
* **Model**: one MLP trunk shared by every task and one linear head per task (multi-task learning); a head
  answers 0 (its task's mean) for an architecture with a token its task never showed, so a source that never saw
  an op has no opinion on it.

:meth:`TransferPrior.features` gives ``[n, tasks]`` per-task scores; EPNAS's online predictor
(:mod:`mlsysopt.nas.gp`) weighs the tasks by how well they explain the target's evaluations so far. The prior never
sees the target task: :func:`leave_one_out` builds it from the other NAS-Bench-Graph tables.
Fitting is deterministic for a seed (one torch thread); a prior is saved and loaded with :meth:`state_dict`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas.knobs import MAX_POOL, MAX_PRED_EPOCHS, MAX_WIDTH, check_config, knob
from mlsysopt.runtime.threads import torch_threads

#: Decoded fields that identify a cell or a space rather than describe it (never features).
IGNORED_FIELDS = ("space", "key")
#: At most this many tokens (features) in one prior: a vocabulary beyond it means the records are not categorical.
MAX_TOKENS = 20_000


@dataclass
class PriorConfig:
    """How the transfer prior is trained (checked on creation).

    Args:
        hidden: Width of the two-layer ReLU trunk, 1 to 4096.
        epochs: Training epochs, 1 to 100000.
        lr: Adam learning rate, > 0.
        batch: Minibatch size, >= 1.
        per_task: Most records used per source task (a uniform sample beyond), >= 2.
        weight_decay: Adam weight decay, >= 0.
        seed: Seed of sampling and initialization, >= 0.

    Raises:
        InvalidOption: If a knob has the wrong type or is out of range.
    """

    hidden: int = knob(128, 1, MAX_WIDTH)  # trunk width (two ReLU layers)
    epochs: int = knob(40, 1, MAX_PRED_EPOCHS)
    lr: float = knob(3e-3, 0, lo_open=True)
    batch: int = knob(512, 1, MAX_POOL)
    per_task: int = knob(6000, 2, MAX_POOL)  # records used per task at most (a uniform sample of the rest)
    weight_decay: float = knob(1e-5, 0)
    seed: int = knob(0, 0)

    def __post_init__(self) -> None:
        check_config(self)


# ---------------------------------------------------------------------------- features
def tokens(decoded: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``path=value`` tokens of a decoded architecture (nested dicts and lists flattened; ids left out)."""
    out: list[str] = []
    for k, v in decoded.items():
        if not prefix and (k in IGNORED_FIELDS or (k == "blocks" and isinstance(v, int))):
            continue  # ids, and a block count the per-block choices already imply
        _add_tokens(out, f"{prefix}.{k}" if prefix else str(k), v)
    return out


def _add_tokens(out: list[str], path: str, v: Any) -> None:
    """Append the tokens of value ``v`` at ``path`` to ``out`` (an int or str leaf first: no ABC check for it)."""
    if type(v) is int or type(v) is str:
        out.append(f"{path}={v}")
    elif isinstance(v, Mapping):
        out += tokens(v, path)
    elif isinstance(v, list | tuple):
        for i, x in enumerate(v):
            _add_tokens(out, f"{path}[{i}]", x)
    else:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        out.append(f"{path}={v}")


def normal_scores(y: np.ndarray) -> np.ndarray:
    """Ranks of ``y`` (ties averaged) mapped through the inverse normal CDF: the task-free target scale."""
    from scipy.stats import norm, rankdata  # deferred: scipy loads only when normal scores are computed

    y = np.asarray(y, dtype=np.float64)
    if len(y) < 2:
        return np.zeros(len(y))
    return np.asarray(norm.ppf((rankdata(y) - 0.5) / len(y)))


# ---------------------------------------------------------------------------- records
@dataclass
class TaskRecords:
    """One source task's evaluations: decoded architectures and their validation performance."""

    name: str
    decoded: list[dict[str, Any]]
    perf: np.ndarray


def records_task(name: str, evaluations: Iterable[Mapping[str, Any]]) -> TaskRecords:
    """A :class:`TaskRecords` from result.json ``evaluations`` entries (failed ones and ones without ``decoded``
    are left out; in hard-constraint runs infeasible ones were never evaluated)."""
    dec, perf = [], []
    for i, rec in enumerate(evaluations):
        if not isinstance(rec, Mapping):
            raise MlsysoptError(f"history record {i} of task '{name}' is a {type(rec).__name__}, not a dict")
        value = rec.get("perf")
        if not rec.get("ok", True) or value is None or not isinstance(rec.get("decoded"), Mapping):
            continue
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise MlsysoptError(f"history record {i} of task '{name}': perf must be a number, got {value!r}")
        dec.append(dict(rec["decoded"]))
        perf.append(float(value))
    return TaskRecords(name, dec, np.asarray(perf, dtype=np.float64))


# ---------------------------------------------------------------------------- the prior
class TransferPrior:
    """A multi-task MLP over architecture tokens, one head per source task (see the module docstring).

    Args:
        config: training knobs (:class:`PriorConfig`).
    """

    def __init__(self, config: PriorConfig | None = None) -> None:
        self.cfg = config or PriorConfig()
        self.tasks: list[str] = []
        self.vocab: dict[str, int] = {}
        self.task_tokens: list[np.ndarray] = []  # per task: which tokens its records showed (bool [V])
        self._net: Any = None

    # ------------------------------------------------------------------ fitting
    def fit(self, tasks: Sequence[TaskRecords]) -> TransferPrior:
        """Train on the records of ``tasks`` (each needs >= 2 evaluations); returns ``self``."""
        tasks = [t for t in tasks if len(t.perf) >= 2]
        if not tasks:
            raise MlsysoptError("a transfer prior needs at least one source task with 2 or more evaluations")
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise MlsysoptError(f"source task names repeat: {sorted({n for n in names if names.count(n) > 1})}")
        rng = np.random.default_rng(self.cfg.seed)
        chosen = []
        for t in tasks:
            idx = np.arange(len(t.perf))
            if len(idx) > self.cfg.per_task:
                idx = np.sort(rng.choice(len(idx), self.cfg.per_task, replace=False))
            chosen.append(idx)
        vocab: dict[str, int] = {}
        toks = []
        for t, idx in zip(tasks, chosen, strict=True):
            per = [tokens(t.decoded[i]) for i in idx]
            for ts in per:
                for tok in ts:
                    vocab.setdefault(tok, len(vocab))
            toks.append(per)
            if len(vocab) > MAX_TOKENS:
                raise MlsysoptError(
                    f"the history records have more than {MAX_TOKENS:,} distinct choice values: a transfer prior "
                    "reads categorical choices (continuous knobs are not supported)"
                )
        self.tasks, self.vocab = names, vocab
        X, y, task_id = [], [], []
        self.task_tokens = []
        for j, (t, idx, per) in enumerate(zip(tasks, chosen, toks, strict=True)):
            Xj = self._encode_tokens(per)
            self.task_tokens.append(Xj.any(0))
            X.append(Xj)
            y.append(normal_scores(t.perf[idx]))
            task_id.append(np.full(len(idx), j))
        Xa = torch.from_numpy(np.concatenate(X))
        ya = torch.from_numpy(np.concatenate(y).astype(np.float32))
        ta = torch.from_numpy(np.concatenate(task_id))
        cfg = self.cfg
        with torch_threads(1), torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            net = _MultiHead(len(vocab), cfg.hidden, len(tasks))
            opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True)
            gen = torch.Generator().manual_seed(cfg.seed)
            n = len(ya)
            for _ in range(cfg.epochs):
                perm = torch.randperm(n, generator=gen)
                for s in range(0, n, cfg.batch):
                    b = perm[s : s + cfg.batch]
                    pred = net(Xa[b]).gather(1, ta[b, None]).squeeze(1)
                    loss = ((pred - ya[b]) ** 2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
        self._net = net.eval()
        return self

    def _encode_tokens(self, per: Sequence[Sequence[str]]) -> np.ndarray:
        X = np.zeros((len(per), len(self.vocab)), dtype=np.float32)
        for i, ts in enumerate(per):
            for tok in ts:
                j = self.vocab.get(tok)
                if j is not None:
                    X[i, j] = 1.0
        return X

    # ------------------------------------------------------------------ scoring
    @property
    def fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`load_state_dict`) has run."""
        return self._net is not None

    def features(self, decoded: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Per-task scores ``[n, tasks]`` (normal-score units; 0 where a task never showed one of the tokens that
        some other task showed)."""
        if self._net is None:
            raise MlsysoptError("the transfer prior is not fitted")
        X = self._encode_tokens([tokens(d) for d in decoded])  # tokens no task showed carry nothing: left out
        with torch.no_grad(), torch_threads(1):
            out = self._net(torch.from_numpy(X)).double().numpy()
        covered = np.stack([~((X > 0) & ~tt[None, :]).any(1) for tt in self.task_tokens], 1)
        return np.where(covered, out, 0.0)

    def score(self, decoded: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """The prior's zero-shot score of each architecture: the mean over source tasks of :meth:`features`."""
        return self.features(decoded).mean(1)

    # ------------------------------------------------------------------ saving
    def state_dict(self) -> dict[str, Any]:
        """Plain data and tensors (``torch.save``-able, loadable with ``weights_only=True``)."""
        if self._net is None:
            raise MlsysoptError("the transfer prior is not fitted")
        return {
            "config": asdict(self.cfg),
            "tasks": list(self.tasks),
            "vocab": list(self.vocab),
            "task_tokens": [t.tolist() for t in self.task_tokens],
            "net": copy.deepcopy(self._net.state_dict()),
        }

    @classmethod
    def from_state_dict(cls, d: Mapping[str, Any]) -> TransferPrior:
        """Inverse of :meth:`state_dict`."""
        prior = cls(PriorConfig(**d["config"]))
        prior.tasks = list(d["tasks"])
        prior.vocab = {t: i for i, t in enumerate(d["vocab"])}
        prior.task_tokens = [np.asarray(t, dtype=bool) for t in d["task_tokens"]]
        net = _MultiHead(len(prior.vocab), prior.cfg.hidden, len(prior.tasks))
        net.load_state_dict(d["net"])
        prior._net = net.eval()
        return prior

    def describe(self) -> str:
        """E.g. ``"transfer prior from 8 task(s): nasbench-graph:cora, ..."``."""
        return f"transfer prior from {len(self.tasks)} task(s): {', '.join(self.tasks)}"


class _MultiHead(nn.Module):
    """Trunk ``V -> H -> H`` (ReLU) and one linear head per task: ``[N, V] -> [N, tasks]``."""

    def __init__(self, d_in: int, hidden: int, tasks: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.heads = nn.Linear(hidden, tasks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.heads(self.trunk(x))


# ---------------------------------------------------------------------------- building priors
def prior_from_records(
    runs: Iterable[tuple[Sequence[Mapping[str, Any]], Mapping[str, Any]]], config: PriorConfig | None = None
) -> TransferPrior:
    """A prior from earlier runs: ``(result.json["evaluations"], settings)`` pairs (the BOARD's history records).

    Runs of the same ``settings["space"]`` are one task; a space name is the task's name.

    Args:
        runs: ``(evaluations, settings)`` pairs: a run's ``result.json["evaluations"]`` records and its settings
            (``settings["space"]`` names the task).
        config: How the prior is trained (None: :class:`PriorConfig` defaults).

    Returns:
        TransferPrior: The fitted prior, one task per space name.

    Raises:
        MlsysoptError: If a record is malformed or no task has two or more usable evaluations.
    """
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for evaluations, settings in runs:
        name = str(settings.get("space", "task")) if isinstance(settings, Mapping) else "task"
        grouped.setdefault(name, []).extend(evaluations)
    return TransferPrior(config).fit([records_task(n, evs) for n, evs in grouped.items()])


def history_tasks(histories: Iterable[Mapping[str, Any]]) -> list[TaskRecords]:
    """One task per history of the study store (``{"study", "settings", "records"}``, :mod:`mlsysopt.store`)."""
    tasks = []
    for i, h in enumerate(histories):
        name = str(h.get("study") or (h.get("settings") or {}).get("space") or f"history-{i}")
        tasks.append(records_task(name, h.get("records") or []))
    return tasks


class PriorScorer:
    """A prior's per-task scores of one space's architectures, computed once per architecture (by ``space.key``).

    Args:
        prior: the fitted transfer prior.
        space: the target space (``space.decode`` gives what the prior reads).
    """

    def __init__(self, prior: TransferPrior, space: Any) -> None:
        self.prior, self.space = prior, space
        self._cache: dict[Any, np.ndarray] = {}
        self._key = space.key if callable(getattr(space, "key", None)) else (lambda a: a)

    def features(self, archs: Sequence[Any]) -> np.ndarray:
        """``[n, tasks]`` scores of ``archs`` (see :meth:`TransferPrior.features`)."""
        keys = [self._key(a) for a in archs]
        todo = {k: a for k, a in zip(keys, archs, strict=True) if k not in self._cache}
        if todo:
            rows = self.prior.features([self.space.decode(a) for a in todo.values()])
            self._cache.update(zip(todo, rows, strict=True))
        if not keys:
            return np.zeros((0, len(self.prior.tasks)))
        return np.stack([self._cache[k] for k in keys])

    def score(self, archs: Sequence[Any]) -> np.ndarray:
        """The prior's zero-shot score of each architecture (mean over source tasks)."""
        return self.features(archs).mean(1)
