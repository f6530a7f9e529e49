"""The search driver shared by every NAS method: Optuna-like ask/tell searchers, parallel evaluation, resume.

:func:`run_search` asks the searcher for a batch of ``workers`` candidates, evaluates them through a
``mlsysopt.runtime`` executor (the top-level, picklable :func:`evaluate_one`), retries each failure once, tells the
searcher, and atomically checkpoints the history and the searcher's state after every batch. The budget counts
evaluations: a retried failure counts once. In hard-constraint mode an infeasible candidate (judged on the cheap
``space.resources``) is never evaluated: it is told back as failed without spending budget, and ``result.best`` is the
best *feasible* evaluation by validation performance. In soft mode ``best`` maximises the MnasNet reward.
Checkpoints are ``torch.save`` files read back with ``weights_only=True`` (plain data and tensors only).
"""

from __future__ import annotations

import io
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from mlsysopt.errors import InvalidArchitecture, MlsysoptError
from mlsysopt.io import write_atomic
from mlsysopt.nas.constraints import Constraints
from mlsysopt.nas.evaluation import evaluate_batch, evaluate_one
from mlsysopt.nas.spaces.base import Arch, Evaluation, SearchSpace
from mlsysopt.runtime import Executor, SerialExecutor

CHECKPOINT_VERSION = 1
PATIENCE = 3  # consecutive empty asks before the driver decides the searcher has nothing left to propose


@dataclass
class SearcherConfig:
    """Knobs shared by every searcher (subclasses extend this dataclass)."""

    tries: int = 2000  # random draws per ask before a searcher gives up finding a new admissible candidate


class Searcher(ABC):
    """One NAS method behind an Optuna-like ask/tell interface; ``knobs`` fill the method's ``Config``.

    Helpers shared by every method cache each architecture's validity, resources and identity. The identity is
    ``space.key(arch)`` when the space has such a method (NAS-Bench-Graph maps isomorphic cells to one table key),
    so no method spends an evaluation on an architecture equivalent to one it already proposed.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[SearcherConfig]] = SearcherConfig

    def __init__(
        self, space: SearchSpace, constraints: Constraints | None = None, budget: int = 100, seed: int = 0, **knobs: Any
    ) -> None:
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            raise MlsysoptError(f"budget must be an integer >= 1 (evaluations), got {budget!r}")
        known = [f.name for f in fields(self.Config)]
        unknown = sorted(set(knobs) - set(known))
        if unknown:
            raise MlsysoptError(
                f"unknown knob(s) for method '{self.name}': {', '.join(unknown)} (known: {', '.join(known)})"
            )
        self.cfg = self.Config(**knobs)
        self.space = space
        self.constraints = constraints if constraints is not None else Constraints()
        self.constraints.check_resources(space)
        self.budget, self.seed = budget, int(seed)
        self.rng = np.random.default_rng(seed)
        self.proposed: list[Arch] = []  # every architecture ever proposed, in order
        self.seen: set[Hashable] = set()  # their keys: no architecture (or table-equivalent one) is proposed twice
        self.worst: float | None = None  # lowest reward seen: the penalty for infeasible or failed candidates
        self._cache: dict[Arch, tuple[bool, Hashable, dict[str, float]]] = {}
        self.met = dict.fromkeys(self.constraints.names, False)  # constraint -> met by any architecture looked at

    # ---------------------------------------------------------------- interface
    @abstractmethod
    def ask(self, n: int) -> list[Arch]:
        """Up to ``n`` new candidates to evaluate next, in parallel (fewer or none when nothing admissible is left)."""

    @abstractmethod
    def tell(self, evals: list[Evaluation]) -> None:
        """The outcomes of asked candidates (failed and never-evaluated infeasible ones have ``ok=False``)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume (plain data and tensors only)."""
        return {
            "rng": self.rng.bit_generator.state,
            "proposed": [[*a.choices, a.blocks] for a in self.proposed],
            "worst": self.worst,
            "met": dict(self.met),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Inverse of :meth:`state_dict`."""
        self.rng.bit_generator.state = d["rng"]
        self.proposed, self.seen = [], set()
        self.mark([Arch(tuple(s[:-1]), s[-1]) for s in d["proposed"]])
        self.worst = d["worst"]
        self.met = dict(d["met"])

    # ---------------------------------------------------------------- helpers for subclasses
    def _info(self, arch: Arch) -> tuple[bool, Hashable, dict[str, float]]:
        """(valid, key, cheap resources) of ``arch``, computed once: table spaces make each of these a look-up."""
        if arch not in self._cache:
            key: Hashable = arch
            try:
                if callable(getattr(self.space, "key", None)):
                    key = self.space.key(arch)  # checks the architecture too
                else:
                    self.space.check(arch)
            except InvalidArchitecture:
                self._cache[arch] = (False, arch, {})
            else:
                res = dict(self.space.resources(arch))
                self._cache[arch] = (True, key, res)
                for name, v in self.constraints.values(res).items():
                    self.met[name] = self.met[name] or v <= 0
        return self._cache[arch]

    def valid(self, arch: Arch) -> bool:
        """Whether ``arch`` is in the space (``space.is_valid``, cached)."""
        return self._info(arch)[0]

    def key(self, arch: Arch) -> Hashable:
        """Identity for de-duplication: ``space.key(arch)`` when the space has one (equivalent cells), else ``arch``."""
        return self._info(arch)[1]

    def resources(self, arch: Arch) -> dict[str, float]:
        """Cheap resources of ``arch`` (cached)."""
        info = self._info(arch)
        return info[2] if info[0] else dict(self.space.resources(arch))

    def feasible(self, arch: Arch) -> bool:
        """Whether ``arch`` meets every constraint on its cheap resources."""
        return self.constraints.feasible(self.resources(arch))

    def fresh(self, arch: Arch) -> bool:
        """Valid and never proposed (nor any equivalent architecture)."""
        return self.valid(arch) and self.key(arch) not in self.seen

    def admissible(self, arch: Arch) -> bool:
        """Fresh and (in hard mode) feasible: worth spending an evaluation on."""
        return self.fresh(arch) and (not self.constraints.hard or self.feasible(arch))

    def mark(self, archs: list[Arch]) -> None:
        """Record ``archs`` as proposed."""
        for a in archs:
            self.proposed.append(a)
            self.seen.add(self.key(a))

    def draw(self, gen: Callable[[], Arch], n: int) -> list[Arch]:
        """Up to ``n`` admissible architectures from ``gen`` (at most ``cfg.tries`` draws), marked as proposed."""
        out: list[Arch] = []
        keys: set[Hashable] = set()
        for _ in range(max(self.cfg.tries, 1)):
            if len(out) >= n:
                break
            arch = gen()
            if self.admissible(arch) and self.key(arch) not in keys:
                out.append(arch)
                keys.add(self.key(arch))
        self.mark(out)
        return out

    def usable(self, ev: Evaluation) -> bool:
        """Evaluated, finite, and (in hard mode) feasible on its measured resources: a real data point."""
        if not ev.ok or not math.isfinite(ev.perf):
            return False
        return not self.constraints.hard or self.constraints.feasible({**self.resources(ev.arch), **ev.resources})

    def reward(self, ev: Evaluation) -> float:
        """``Constraints.reward`` of a usable evaluation; failed or infeasible ones get :meth:`penalty`."""
        if not self.usable(ev):
            return self.penalty()
        r = self.constraints.reward(ev.perf, {**self.resources(ev.arch), **ev.resources})
        self.worst = r if self.worst is None else min(self.worst, r)
        return r

    def penalty(self) -> float:
        """Reward for infeasible or failed candidates: the worst reward so far (at first, the constraints' penalty)."""
        return self.constraints.penalty if self.worst is None else self.worst


@dataclass
class SearchResult:
    """What a search found: the full history, the best architecture (feasible in hard mode), counts and timing."""

    method: str
    space: str
    history: list[Evaluation]
    best: Evaluation | None
    message: str
    failed: int
    wall_s: float
    skipped: int = 0
    constraints: dict[str, Any] = field(default_factory=dict)
    best_decoded: dict[str, Any] | None = None

    def best_so_far(self) -> list[float]:
        """Best feasible validation performance after each evaluation (NaN until the first)."""
        cons = Constraints.from_dict(self.constraints) if self.constraints else Constraints()
        out, cur = [], float("nan")
        for ev in self.history:
            if ev.ok and math.isfinite(ev.perf) and (not cons.hard or cons.feasible(ev.resources)):
                cur = ev.perf if math.isnan(cur) else max(cur, ev.perf)
            out.append(cur)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary with the full history."""
        return {
            "method": self.method,
            "space": self.space,
            "constraints": self.constraints,
            "evaluations": len(self.history),
            "failed": self.failed,
            "skipped_infeasible": self.skipped,
            "wall_s": self.wall_s,
            "message": self.message,
            "best": None if self.best is None else self.best.to_dict(),
            "best_decoded": self.best_decoded,
            "history": [ev.to_dict() for ev in self.history],
        }


def _save(path: Path, data: dict[str, Any]) -> None:
    buf = io.BytesIO()
    torch.save(data, buf)
    write_atomic(path, buf.getvalue())


def _load(path: Path) -> dict[str, Any]:
    try:
        data = torch.load(path, weights_only=True)
    except Exception as e:
        raise MlsysoptError(f"{path}: not a readable search checkpoint ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict) or data.get("version") != CHECKPOINT_VERSION:
        raise MlsysoptError(f"{path}: not a search checkpoint of version {CHECKPOINT_VERSION}")
    return data


def _best(history: list[Evaluation], searcher: Searcher) -> Evaluation | None:
    """Hard mode: the best feasible by validation performance; soft mode: the best by MnasNet reward (first wins)."""
    usable = [ev for ev in history if searcher.usable(ev)]
    if not usable:
        return None
    if searcher.constraints.hard:
        return max(usable, key=lambda ev: ev.perf)
    return max(
        usable, key=lambda ev: searcher.constraints.reward(ev.perf, {**searcher.resources(ev.arch), **ev.resources})
    )


def _message(best: Evaluation | None, history: list[Evaluation], searcher: Searcher) -> str:
    cons = searcher.constraints
    if best is not None:
        violated = cons.violated({**searcher.resources(best.arch), **best.resources})
        note = f"; violates (soft) {', '.join(violated)}" if violated else ""
        return f"best validation performance {best.perf:.4g} after {len(history)} evaluation(s){note}"
    if not any(ev.ok for ev in history) and history:
        return f"all {len(history)} evaluation(s) failed; last error: {history[-1].error}"
    never = [c.describe() for c in cons.constraints if not searcher.met.get(c.name, False)]
    if never:
        return f"no architecture met the constraints: never met {', '.join(never)}"
    if cons.constraints:
        return f"no architecture met all constraints at once ({cons.describe()})"
    return "no architecture was evaluated"


def run_search(
    searcher: Searcher,
    executor: Executor | None = None,
    workers: int = 1,
    checkpoint: str | Path | None = None,
    on_eval: Callable[[Evaluation, int], None] | None = None,
) -> SearchResult:
    """Run ``searcher`` to its budget in batches of ``workers``; resume from ``checkpoint`` when it exists."""
    if workers < 1:
        raise MlsysoptError(f"workers must be >= 1, got {workers}")
    executor = executor or SerialExecutor()
    space, cons = searcher.space, searcher.constraints
    history: list[Evaluation] = []
    failed = skipped = 0
    wall_before = 0.0
    ckpt = Path(checkpoint) if checkpoint is not None else None
    if ckpt is not None and ckpt.exists():
        data = _load(ckpt)
        for key, want in (("method", searcher.name), ("space", space.name), ("seed", searcher.seed)):
            if data.get(key) != want:
                raise MlsysoptError(f"{ckpt}: checkpoint is for {key} {data.get(key)!r}, not {want!r}")
        history = [Evaluation.from_dict(d) for d in data["history"]]
        failed, skipped, wall_before = data["failed"], data["skipped"], data["wall_s"]
        searcher.load_state_dict(data["searcher"])
    t0 = time.perf_counter()
    idle = 0
    while len(history) < searcher.budget and idle < PATIENCE:
        n = min(workers, searcher.budget - len(history))
        archs = list(searcher.ask(n))[:n]
        for a in archs:
            space.check(a)
        todo = [a for a in archs if not cons.hard or searcher.feasible(a)]
        refused = [a for a in archs if a not in todo]
        idle = 0 if todo else idle + 1
        evals = evaluate_batch(executor, space, todo, searcher.seed) if todo else []
        for ev in evals:
            history.append(ev)
            failed += not ev.ok
            if on_eval is not None:
                on_eval(ev, len(history))
        skipped += len(refused)
        infeasible = [
            Evaluation(a, float("nan"), None, searcher.resources(a), 0.0, ok=False, error="infeasible (not evaluated)")
            for a in refused
        ]
        searcher.tell(evals + infeasible)
        if ckpt is not None:
            meta = {"method": searcher.name, "space": space.name, "seed": searcher.seed, "budget": searcher.budget}
            data = {"history": [ev.to_dict() for ev in history], "failed": failed, "skipped": skipped}
            data |= {"wall_s": wall_before + time.perf_counter() - t0, "searcher": searcher.state_dict()}
            _save(ckpt, {"version": CHECKPOINT_VERSION, **meta, "constraints": cons.to_dict(), **data})
    best = _best(history, searcher)
    return SearchResult(
        method=searcher.name,
        space=space.name,
        history=history,
        best=best,
        message=_message(best, history, searcher),
        failed=failed,
        wall_s=wall_before + time.perf_counter() - t0,
        skipped=skipped,
        constraints=cons.to_dict(),
        best_decoded=None if best is None else space.decode(best.arch),
    )


def _methods() -> dict[str, type[Searcher]]:
    # imported here: every method module imports Searcher from this one
    from mlsysopt.nas.baselines import BASELINES
    from mlsysopt.nas.epnas import EPNAS

    return {"epnas": EPNAS, **BASELINES}


def __getattr__(name: str) -> Any:
    if name == "METHODS":
        return _methods()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_method(
    name: str,
    space: SearchSpace,
    constraints: Constraints | None = None,
    budget: int = 100,
    seed: int = 0,
    **knobs: Any,
) -> Searcher:
    """Build the searcher called ``name`` (one of ``METHODS``)."""
    methods = _methods()
    if name not in methods:
        raise MlsysoptError(f"unknown NAS method '{name}' (choose from: {', '.join(methods)})")
    return methods[name](space, constraints, budget=budget, seed=seed, **knobs)


__all__ = ["SearchResult", "Searcher", "SearcherConfig", "evaluate_one", "get_method", "run_search"]
