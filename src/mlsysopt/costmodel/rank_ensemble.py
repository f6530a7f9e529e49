"""A rank ensemble of trained cost models: each graph's scores standardised per member, then a weighted mean.

What the Kaggle "Fast or Slow" (TpuGraphs) solutions did with a GNN and a tree model: the two rank the same
configurations from different features (the GNN sees the graph, the trees its flattened summary), so their errors
differ. Scores live on each member's own scale (a hinge loss's margins, LightGBM's lambdarank scores), so each
member's scores for one graph become z-scores before they are averaged. The weights are chosen on the validation
split (:func:`choose_weights`), never on the test graphs; a weight of 1 on one member is allowed, so the ensemble
can only tie its best member on validation, not lose to it there.

An ensemble's run folder holds ``ensemble.json`` (the members' run folders and the weights); it is read back by
:func:`~mlsysopt.costmodel.inference.load_trainer`, so ``costmodel evaluate`` and ``predict`` take it like any run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.costmodel.metrics import opa, ranking_metrics
from mlsysopt.errors import InvalidCheckpoint, InvalidOption
from mlsysopt.io import read_json

if TYPE_CHECKING:
    from mlsysopt.costmodel.data.record import GraphDataset

ENSEMBLE_NAME = "ensemble.json"
ENSEMBLE_KIND = "mlsysopt-costmodel-ensemble"
#: members an ensemble may have (the weight grid grows as steps ** (members - 1))
MAX_MEMBERS = 4
#: weight grid step per member count (2 members: 0, 0.1, ..., 1; 3-4 members: multiples of 0.25)
GRID_STEP = {2: 0.1, 3: 0.25, 4: 0.25}


def standardised(scores: np.ndarray) -> np.ndarray:
    """One graph's scores as z-scores (a constant vector becomes zeros).

    Args:
        scores: A member's scores for one graph's configurations (lower = faster).

    Returns:
        np.ndarray: ``(scores - mean) / std``.

    Shapes:
        scores: (num_configs,) float -> (num_configs,) float64
    """
    s = np.asarray(scores, dtype=np.float64)
    sd = float(s.std())
    return (s - s.mean()) / sd if sd > 0 and np.isfinite(sd) else np.zeros_like(s)


def combine(member_scores: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """The ensemble's scores of one graph: the weighted mean of the members' standardised scores.

    Args:
        member_scores: Each member's scores for the same configurations.
        weights: One weight per member (non-negative, summing to 1).

    Returns:
        np.ndarray: The combined scores (lower = faster).

    Shapes:
        member_scores: members x (num_configs,) -> (num_configs,)
    """
    return sum(float(w) * standardised(s) for w, s in zip(weights, member_scores, strict=True))


def weight_grid(members: int) -> list[tuple[float, ...]]:
    """Every weight vector on the simplex grid of :data:`GRID_STEP` for ``members`` members.

    Args:
        members: Number of members (2 to :data:`MAX_MEMBERS`).

    Returns:
        list[tuple[float, ...]]: Weight vectors summing to 1, equal weights first.
    """
    steps = round(1 / GRID_STEP[members])
    grid = [tuple(c / steps for c in combo) for combo in itertools.product(range(steps + 1), repeat=members)
            if sum(combo) == steps]  # fmt: skip
    equal = min(grid, key=lambda w: max(w) - min(w))
    return [equal, *(w for w in grid if w != equal)]


def choose_weights(member_preds: Sequence[dict[str, np.ndarray]], truths: dict[str, np.ndarray]
                   ) -> tuple[tuple[float, ...], list[dict[str, Any]]]:  # fmt: skip
    """The weights with the best validation OPA (ties: lower top-1 slowdown, then the more even weights).

    Args:
        member_preds: Per member, its scores by graph name (validation graphs).
        truths: Runtimes by graph name.

    Returns:
        tuple: The chosen weights and the grid's rows ``{"weights", "opa", "slowdown_top1"}``.

    Raises:
        InvalidOption: If no validation graph has runtimes and scores from every member.
    """
    names = [n for n in truths if all(n in p for p in member_preds)]
    if not names:
        raise InvalidOption("the validation split has no graph every member scored: cannot choose weights")
    rows = []
    for w in weight_grid(len(member_preds)):
        preds = [combine([p[n] for p in member_preds], w) for n in names]
        m = ranking_metrics(preds, [truths[n] for n in names])
        rows.append({"weights": list(w), "opa": m["opa"], "slowdown_top1": m["slowdown_top1"]})
    best = max(rows, key=lambda r: (round(r["opa"], 6), -round(r["slowdown_top1"], 6), -max(r["weights"])))
    return tuple(best["weights"]), rows


def check_weights(weights: Sequence[float], members: int) -> tuple[float, ...]:
    """Given weights, checked: one per member, finite, non-negative, not all zero; returned summing to 1.

    Args:
        weights: The weights (any positive scale).
        members: Number of members.

    Returns:
        tuple[float, ...]: The weights divided by their sum.

    Raises:
        InvalidOption: If a weight is missing, negative or not finite, or all are zero.
    """
    w = [float(x) for x in weights]
    if len(w) != members:
        raise InvalidOption(f"--weights: {len(w)} weight(s) for {members} members (give one per --member)")
    if not all(np.isfinite(x) and x >= 0 for x in w) or sum(w) <= 0:
        raise InvalidOption(f"--weights {','.join(map(str, weights))}: weights are non-negative numbers, not all 0")
    return tuple(x / sum(w) for x in w)


class RankEnsemble:
    """Trained ranking models whose standardised scores are averaged with fixed weights.

    Args:
        members: Trained models (a GNN trainer or a tree ranker) of one ranking task, each with ``task`` and
            ``predict(ds) -> {name: scores}``.
        weights: One weight per member (summing to 1).
        runs: The members' run folders (recorded in ``ensemble.json``).
        modes: The members' modes (e.g. ``gst+efd``, ``lightgbm``), for the ensemble's name.
    """

    def __init__(self, members: Sequence[Any], weights: Sequence[float], runs: Sequence[str],
                 modes: Sequence[str]) -> None:  # fmt: skip
        if not 2 <= len(members) <= MAX_MEMBERS:
            raise InvalidOption(f"--member: an ensemble has 2 to {MAX_MEMBERS} members, not {len(members)}")
        tasks = {m.task for m in members}
        if len(tasks) != 1 or tasks & {"malnet"}:
            raise InvalidOption(f"--member: an ensemble ranks configurations of one task (layout or tile); the "
                                f"members are for {', '.join(sorted(tasks))}")  # fmt: skip
        self.members = list(members)
        self.weights = check_weights(weights, len(members))
        self.runs = [str(r) for r in runs]
        self.modes = [str(m) for m in modes]
        self.task = tasks.pop()

    @property
    def mode(self) -> str:
        """The ensemble's name: its members' modes joined by ``+`` (e.g. ``gst+efd+lightgbm``)."""
        return "+".join(self.modes)

    def predict(self, ds: GraphDataset) -> dict[str, np.ndarray]:
        """Per graph: the combined score of every configuration (lower = faster).

        Args:
            ds: Graphs to rank.

        Returns:
            dict[str, np.ndarray]: Scores by graph name.
        """
        preds = [m.predict(ds) for m in self.members]
        return {name: combine([p[name] for p in preds], self.weights) for name in preds[0]}

    def evaluate(self, ds: GraphDataset, comm: Any = None) -> dict[str, float]:
        """Ranking metrics on ``ds`` (as a single model's).

        Args:
            ds: Graphs with runtimes.
            comm: Unused (an ensemble evaluates in one process).

        Returns:
            dict[str, float]: ``opa``, ``kendall``, ``slowdown_top1/5/10``.
        """
        preds = self.predict(ds)
        return ranking_metrics(list(preds.values()), _truths(ds, preds))

    def per_graph_opa(self, ds: GraphDataset) -> dict[str, float]:
        """OPA of every graph of ``ds``, by name.

        Args:
            ds: Graphs with runtimes.

        Returns:
            dict[str, float]: OPA by graph name.
        """
        preds = self.predict(ds)
        return {n: opa(p, t) for (n, p), t in zip(preds.items(), _truths(ds, preds), strict=True)}

    def description(self) -> dict[str, Any]:
        """What ``ensemble.json`` holds: kind, mode, member runs and modes, weights, task."""
        return {"kind": ENSEMBLE_KIND, "mode": self.mode, "task": self.task, "members": self.runs,
                "member_modes": self.modes, "weights": list(self.weights)}  # fmt: skip

    @classmethod
    def from_folder(cls, folder: Path, load_member: Callable[[str], Any]) -> RankEnsemble:
        """The ensemble described by ``folder/ensemble.json``, each member read with ``load_member(run)``.

        Args:
            folder: The ensemble's run folder.
            load_member: Reads one member's run folder (``load_trainer``).

        Returns:
            RankEnsemble: The ensemble.

        Raises:
            InvalidCheckpoint: If the description is not an ensemble's or a member cannot be read.
        """
        path = Path(folder) / ENSEMBLE_NAME
        meta = read_json(path, InvalidCheckpoint)
        if not isinstance(meta, dict) or meta.get("kind") != ENSEMBLE_KIND:
            raise InvalidCheckpoint(f"{path}: not an ensemble description")
        runs, modes, weights = meta.get("members"), meta.get("member_modes"), meta.get("weights")
        if not (isinstance(runs, list) and isinstance(modes, list) and isinstance(weights, list)
                and len(runs) == len(modes) == len(weights)):  # fmt: skip
            raise InvalidCheckpoint(f"{path}: members, member_modes and weights must be lists of one length")
        members = []
        for run in runs:
            if (Path(run) / ENSEMBLE_NAME).is_file():
                raise InvalidCheckpoint(f"{path}: member {run} is itself an ensemble (not supported)")
            try:
                members.append(load_member(run))
            except InvalidCheckpoint as exc:
                raise InvalidCheckpoint(f"{path}: member {run}: {exc}") from None
        try:
            return cls(members, weights, runs, modes)
        except InvalidOption as exc:
            raise InvalidCheckpoint(f"{path}: {exc}") from None


def runtimes_by_name(ds: GraphDataset) -> dict[str, np.ndarray]:
    """Every graph's measured runtimes, by name.

    Args:
        ds: Graphs with runtimes.

    Returns:
        dict[str, np.ndarray]: Runtimes by graph name.

    Raises:
        InvalidOption: If a graph has no runtimes.
    """
    by_name = {}
    for i in range(len(ds)):
        rec = ds.record(i)
        if rec.runtime is None:
            raise InvalidOption(f"{rec.name}: has no runtimes to evaluate against")
        by_name[rec.name] = np.asarray(rec.runtime, np.float64)
    return by_name


def _truths(ds: GraphDataset, preds: dict[str, np.ndarray]) -> list[np.ndarray]:
    by_name = runtimes_by_name(ds)
    return [by_name[n] for n in preds]
