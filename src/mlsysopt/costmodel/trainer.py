"""One trainer for every GNN mode: the epoch loop, validation, checkpoints, resume, time budget, data parallelism.

The per-graph steps of each mode (full | gst | gst+e | gst+ef | gst+efd) are :mod:`mlsysopt.costmodel.gst`;
evaluation is :mod:`mlsysopt.costmodel.evaluation`. An epoch visits the training graphs in a permutation drawn from
(seed, epoch); a step takes ``graphs_per_step`` of them, and graph ``j`` of a step draws its randomness (configs,
segments, SED, dropout) from (seed, epoch, position). So a run does not depend on how its steps are computed: in
one process, or split over data-parallel ranks (``comm``: the graphs of a step spread over the ranks, gradients
summed with an all-reduce, table writes exchanged), it gives the same losses up to float summation order.

``epochs`` and ``finetune_epochs`` are totals for the run: a resumed run does what is missing. Training epochs
cannot be added once finetuning has begun (the backbone is frozen and the F table made), and fewer epochs than
already done are refused. A checkpoint is written atomically after every epoch and when ``timeout`` seconds have
passed (then mid-epoch: the next step, the epoch's losses so far); ``fit(resume=True)`` continues exactly.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import mlsysopt.costmodel.evaluation as evaluation
from mlsysopt.costmodel.checkpoint import check_compatible, checkpoint_path, load_checkpoint, save_checkpoint, tagged
from mlsysopt.costmodel.data.record import ConfigSubset
from mlsysopt.costmodel.gst import GSTSteps, Write, combine
from mlsysopt.costmodel.history import HistoryTable
from mlsysopt.costmodel.losses import ABSOLUTE_LOSSES, get_loss
from mlsysopt.costmodel.memory import PeakMemory
from mlsysopt.costmodel.model import CostModel, ModelConfig
from mlsysopt.costmodel.train_config import AUTO, MODES, TrainConfig
from mlsysopt.costmodel.trainer_data import TrainerData, resolve_prune
from mlsysopt.errors import InvalidCheckpoint, InvalidOption
from mlsysopt.io import RunDir

if TYPE_CHECKING:
    from mlsysopt.costmodel.data.record import GraphDataset
    from mlsysopt.costmodel.distributed import Comm

__all__ = ["MODES", "Progress", "TrainConfig", "Trainer", "combine"]

Progress = Callable[[int, int, dict[str, Any]], None]


class Trainer(TrainerData, GSTSteps):
    """Trains and evaluates a :class:`CostModel` with one of the GST modes (see gst.py and the module docstring).

    Args:
        model_config: Architecture of the cost model.
        train_config: Training knobs; ``mode`` must be a GNN mode (``full``, ``gst``, ``gst+e``, ``gst+ef``,
            ``gst+efd``).

    Raises:
        InvalidOption: If a config is invalid, the mode is a tree baseline, or the loss does not fit the task.
    """

    def __init__(self, model_config: ModelConfig, train_config: TrainConfig) -> None:
        model_config.validate()
        train_config.validate()
        if train_config.mode not in MODES:
            raise InvalidOption(f"mode '{train_config.mode}' is not a GNN mode ({', '.join(MODES)})")
        self.mc, self.tc = model_config, train_config
        self.task = model_config.task
        loss_name = train_config.loss if train_config.loss != "auto" else ("ce" if self.task == "malnet" else "hinge")
        self.loss_fn = get_loss(loss_name, self.task)
        self.absolute = loss_name in ABSOLUTE_LOSSES
        if train_config.prune_hops not in (None, AUTO) and self.task != "layout":
            raise InvalidOption("prune hops applies to layout graphs only")
        self.prune_hops = resolve_prune(train_config.prune_hops, self.task, self.absolute, model_config.layers)
        self.device = torch.device(train_config.device)
        torch.manual_seed(train_config.seed)
        self.model = CostModel(model_config).to(self.device)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=train_config.lr, weight_decay=train_config.weight_decay
        )
        self.ft_optimizer: torch.optim.Optimizer | None = None
        auto = "metis" if self.task == "malnet" else "contiguous"
        self.segment_method = train_config.segmenter if train_config.segmenter != "auto" else auto
        self.segment_size: int | None = None if train_config.segment_size == AUTO else int(train_config.segment_size)
        self.segmenter = None
        if self.segment_size is not None:
            self._make_segmenter(self.segment_size)
        self.table = HistoryTable(model_config.unit_dim)
        self.ft_table = HistoryTable(model_config.embed_dim)
        self.k = 1 if train_config.k == AUTO else int(train_config.k)
        self.steps_per_epoch = 1
        self.history: list[dict[str, Any]] = []
        self.epoch = 0
        self.partial: dict[str, Any] | None = None  # a mid-epoch stop: next step and the epoch's figures so far
        self.stats_ready = False
        self.stopped = False
        self.refresh_s = 0.0
        self.ft_configs: dict[str, np.ndarray] = {}
        self.best: dict[str, Any] | None = None  # the best validation epoch: epoch, metric, value, model weights
        self.probe: dict[str, Any] | None = None  # how k was chosen (the probe step), when it was
        self._cache: OrderedDict[tuple[int, int], list[Any]] = OrderedDict()  # key -> [record, plan or None]
        self._cache_bytes = 0

    @property
    def whole_graph(self) -> bool:
        """True for full-graph training (evaluated with every edge kept)."""
        return self.tc.mode == "full"

    @property
    def eval_chunk(self) -> int:
        """Configurations scored per batch in evaluation."""
        return self.tc.eval_chunk

    # ------------------------------------------------------------------ epochs
    def freeze_backbone(self) -> None:
        """F: stop gradients to everything but the head, and make the head's optimizer."""
        for p in self.model.backbone_parameters():
            p.requires_grad_(False)
        if self.ft_optimizer is None:
            lr = self.tc.finetune_lr or self.tc.lr
            self.ft_optimizer = torch.optim.Adam(self.model.head_parameters(), lr=lr, weight_decay=self.tc.weight_decay)

    def _refresh(self, ds: GraphDataset, comm: Comm | None) -> None:
        rank, world = (0, 1) if comm is None else (comm.rank, comm.world)
        for i in range(rank, len(ds), world):
            self.refresh_graph(self.record(ds, i), self._rng(10**6, i))
        if comm is not None:  # every rank gets every graph's F rows
            mine = {n: self.ft_table.export(n) for n in self.ft_table.graphs}
            for part in comm.gather((mine, {k: v for k, v in self.ft_configs.items()})):
                for name, rows in part[0].items():
                    self.ft_table.put(name, *rows)
                self.ft_configs.update(part[1])

    def _step(self, ds: GraphDataset, batch: np.ndarray, start: int, epoch: int, finetune: bool,
              comm: Comm | None) -> tuple[list[tuple[int, float]], float | None]:  # fmt: skip
        optimizer = self.ft_optimizer if finetune else self.optimizer
        assert optimizer is not None
        step_fn = self.finetune_graph if finetune else self.train_graph
        rank, world = (0, 1) if comm is None else (comm.rank, comm.world)
        self.model.train()
        every = self.tc.measure_memory
        measure = every > 0 and (start // self.tc.graphs_per_step) % every == 0
        with PeakMemory(self.device, enabled=measure) as pm:
            optimizer.zero_grad(set_to_none=True)
            losses: list[tuple[int, float]] = []
            writes: list[tuple[int, list[Write]]] = []
            for j in range(rank, len(batch), world):
                pos = start + j
                with pm.paused():  # reading the file is the host's business, not the step's
                    rec = self.record(ds, int(batch[j]))
                rng = self._rng(epoch, pos)
                torch.manual_seed(int(rng.integers(2**62)))
                loss, w = step_fn(rec, 1.0 / len(batch), rng)
                losses.append((pos, loss))
                writes.append((pos, w))
            params = self.model.head_parameters() if finetune else list(self.model.parameters())
            if comm is not None:
                comm.all_reduce_grads(params)
                losses = sorted(x for part in comm.gather(losses) for x in part)
                writes = sorted((x for part in comm.gather(writes) for x in part), key=lambda t: t[0])
            if self.tc.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, self.tc.grad_clip)
            optimizer.step()
            for _, w in writes:
                for name, rows, units in w:
                    self.table.put(name, rows, units)
            self.table.tick()
        if not measure:
            return losses, None
        peak = pm.peak_mb if comm is None else max(comm.gather(pm.peak_mb))
        return losses, round(peak, 4)

    def _epoch(self, ds: GraphDataset, epoch: int, finetune: bool, tick: Callable[[dict[str, Any]], None],
               comm: Comm | None, deadline: float | None) -> dict[str, Any] | None:  # fmt: skip
        """One epoch; None when the time budget ran out mid-epoch (``self.partial`` then holds where it stopped)."""
        order = self._rng(7, epoch).permutation(len(ds))
        part = self.partial if self.partial is not None and self.partial["epoch"] == epoch else None
        losses, step_mb = (list(part["losses"]), list(part["step_mb"])) if part else ([], [])
        first = part["next_step"] if part else 0
        t0 = time.perf_counter() - (part["elapsed"] if part else 0.0)
        self.partial = None
        gps = self.tc.graphs_per_step
        for start in range(first * gps, len(order), gps):
            step_losses, peak = self._step(ds, order[start : start + gps], start, epoch, finetune, comm)
            losses += [x for _, x in step_losses]
            if peak is not None:
                step_mb.append(peak)
            tick({"loss": losses[-1]})
            late = deadline is not None and time.monotonic() > deadline
            if (comm.any(late) if comm is not None else late) and start + gps < len(order):
                self.partial = {"epoch": epoch, "next_step": start // gps + 1, "losses": losses, "step_mb": step_mb,
                                "elapsed": time.perf_counter() - t0}  # fmt: skip
                return None
        return {"loss": float(np.mean(losses)), "peak_step_mb": max(step_mb, default=0.0), "step_mb": step_mb,
                "epoch_s": time.perf_counter() - t0}  # fmt: skip

    def fit(
        self,
        train_ds: GraphDataset,
        valid_ds: GraphDataset | None = None,
        run_dir: str | Path | RunDir | None = None,
        resume: bool = False,
        progress: Progress | None = None,
        timeout: float | None = None,
        comm: Comm | None = None,
    ) -> list[dict[str, Any]]:
        """Train (and finetune for the F modes), validating every ``validate_every`` epochs; returns the history.

        History entries: epoch, phase (train | finetune), loss (mean over the epoch's graphs), peak_step_mb and
        step_mb (tensor memory of every step, see memory.py), epoch_s (training), eval_s and valid_<metric> on
        the epochs that validate (every ``validate_every``-th and the last of each phase). ``progress(done_steps,
        total_steps, info)`` is called after every optimizer step. With ``timeout`` (seconds) the run stops,
        checkpointed, once that much time has passed; ``self.stopped`` then says so.
        """
        if len(train_ds) == 0:
            raise InvalidOption("the training set has no graphs")
        deadline = None if timeout is None else time.monotonic() + timeout
        if valid_ds is not None and self.tc.valid_configs and self.task != "malnet":
            valid_ds = ConfigSubset(valid_ds, self.tc.valid_configs)
        ckpt, save = _checkpoint_writer(run_dir, comm)
        if resume and ckpt is not None and ckpt.exists():
            self.load_state_dict(load_checkpoint(ckpt), ckpt)
        if not self.stats_ready:
            self.prepare(train_ds)
        if self.epoch == 0 and self.partial is None:
            self.choose_k(train_ds)
        self._check_budget(ckpt)
        self.steps_per_epoch = math.ceil(len(train_ds) / self.tc.graphs_per_step)
        ft_done = sum(h["phase"] == "finetune" for h in self.history)
        total = self.tc.epochs + (self.tc.finetune_epochs if self.tc.finetunes else 0)
        done = self.epoch * self.steps_per_epoch + (self.partial["next_step"] if self.partial else 0)
        self.stopped = False
        n_train = self.tc.epochs
        plan = [(e, False) for e in range(self.epoch, n_train)] if not ft_done else []
        plan += [(e, True) for e in range(max(self.epoch, n_train), total)]
        for epoch, finetune in plan:
            if finetune and self.ft_optimizer is None:
                t_ref = time.perf_counter()
                self._refresh(train_ds, comm)
                self.freeze_backbone()
                self.refresh_s = time.perf_counter() - t_ref

            def tick(info: dict[str, Any], epoch: int = epoch, finetune: bool = finetune) -> None:
                nonlocal done
                done += 1
                if progress is not None:
                    progress(done, total * self.steps_per_epoch, {"epoch": epoch + 1, "finetune": finetune, **info})

            stats = self._epoch(train_ds, epoch, finetune, tick, comm, deadline)
            if stats is None:
                self.stopped = True
                if save is not None:
                    save(self.state_dict())
                return self.history
            entry: dict[str, Any] = {"epoch": epoch + 1, "phase": "finetune" if finetune else "train", **stats}
            last_of_phase = epoch + 1 in (n_train, total)
            if valid_ds is not None and len(valid_ds) and ((epoch + 1) % self.tc.validate_every == 0 or last_of_phase):
                t_ev = time.perf_counter()
                entry |= {f"valid_{k}": v for k, v in self.evaluate(valid_ds, comm).items()}
                entry["eval_s"] = time.perf_counter() - t_ev
                self._track_best(epoch + 1, entry)
            self.history.append(entry)
            self.epoch = epoch + 1
            if save is not None:
                save(self.state_dict())
            if deadline is not None and time.monotonic() > deadline and epoch + 1 < total:
                self.stopped = True
                return self.history
        if self.tc.keep_best and self.best is not None:
            self.model.load_state_dict(self.best["model"])
        return self.history

    @property
    def best_metric(self) -> str:
        """The validation metric the best epoch is chosen by (OPA for rankings, accuracy for classes)."""
        return "accuracy" if self.task == "malnet" else "opa"

    def _track_best(self, epoch: int, entry: dict[str, Any]) -> None:
        value = entry.get(f"valid_{self.best_metric}")
        if value is None or not np.isfinite(value):
            return
        if self.best is None or value > self.best["value"]:
            weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.best = {"epoch": epoch, "metric": self.best_metric, "value": float(value), "model": weights}

    def _check_budget(self, ckpt: Path | None) -> None:
        """Resume semantics: epochs and finetune_epochs are totals; refuse what cannot be done."""
        trained = sum(h["phase"] == "train" for h in self.history)
        tuned = sum(h["phase"] == "finetune" for h in self.history)
        where = f"{ckpt}: " if ckpt is not None else ""
        if self.tc.epochs < trained:
            raise InvalidCheckpoint(f"{where}this run already trained {trained} epochs: --epochs {self.tc.epochs} "
                                    f"is fewer (epochs are totals, not additions)")  # fmt: skip
        if (tuned or self.ft_optimizer is not None) and self.tc.epochs != trained:
            raise InvalidCheckpoint(
                f"{where}this run trained {trained} epochs and then began finetuning ({tuned} head epochs): "
                f"--epochs {self.tc.epochs} cannot add backbone epochs after finetuning (keep --epochs {trained} "
                "and raise --finetune-epochs, or start a new run)"
            )
        if self.tc.finetunes and self.tc.finetune_epochs < tuned:
            raise InvalidCheckpoint(f"{where}this run already finetuned {tuned} epochs: --finetune-epochs "
                                    f"{self.tc.finetune_epochs} is fewer")  # fmt: skip

    # ------------------------------------------------------------------ evaluation (always fresh, never the table)
    def predict(self, ds: GraphDataset, comm: Comm | None = None) -> dict[str, np.ndarray]:
        """Per graph: a score per config (lower = faster) or class logits, every segment computed fresh."""
        return {name: pred for name, _, pred in evaluation.predictions(self, ds, comm)}

    def evaluate(self, ds: GraphDataset, comm: Comm | None = None) -> dict[str, float]:
        """Ranking metrics (opa, kendall, slowdown_top1/5/10) or classification metrics (accuracy, macro_f1)."""
        return evaluation.evaluate(self, ds, comm)

    # ------------------------------------------------------------------ checkpoints
    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> Trainer:
        """A trainer holding the model of a checkpoint (a run directory or file), e.g. to evaluate or predict."""
        path = checkpoint_path(path)
        data = load_checkpoint(path)
        try:
            mc = ModelConfig.from_dict(data["model_config"])
            tc = TrainConfig.from_dict({**data["train_config"], **overrides})
        except (InvalidOption, TypeError) as exc:
            raise InvalidCheckpoint(f"{path}: its configuration is not this build's ({exc})") from None
        trainer = cls(mc, tc)
        trainer.load_state_dict(data, path)
        if trainer.tc.keep_best and trainer.best is not None:
            trainer.model.load_state_dict(trainer.best["model"])
        return trainer

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: configs, weights, optimizers, tables, epoch, history, k."""
        return {
            "model_config": self.mc.to_dict(),
            "train_config": self.tc.to_dict(),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "ft_optimizer": None if self.ft_optimizer is None else self.ft_optimizer.state_dict(),
            "table": self.table.state_dict(),
            "ft_table": self.ft_table.state_dict(),
            "ft_configs": {k: torch.from_numpy(np.asarray(v, dtype=np.int64)) for k, v in self.ft_configs.items()},
            "epoch": self.epoch,
            "partial": self.partial,
            "k": self.k,
            "stats_ready": self.stats_ready,
            "history": self.history,
            "segment_size": self.segment_size,
            "prune_hops": self.prune_hops,
            "best": self.best,
            "probe": self.probe,
        }

    def load_state_dict(self, data: dict[str, Any], path: str | Path = "checkpoint") -> None:
        """Continue from :meth:`state_dict` output read from ``path``, after checking its model and mode match."""
        check_compatible(path, data, self.mc.to_dict(), self.tc.to_dict())
        try:
            self.model.load_state_dict(data["model"])
            self.optimizer.load_state_dict(data["optimizer"])
            if data.get("ft_optimizer") is not None:
                self.freeze_backbone()
                assert self.ft_optimizer is not None
                self.ft_optimizer.load_state_dict(data["ft_optimizer"])
            self.table.load_state_dict(data["table"])
            self.ft_table.load_state_dict(data["ft_table"])
            self.ft_configs = {k: v.numpy() for k, v in data["ft_configs"].items()}
            self.epoch, self.stats_ready = int(data["epoch"]), bool(data["stats_ready"])
            self.partial, self.k = data["partial"], int(data["k"])
            self.history = list(data["history"])
            if data.get("segment_size") is not None:
                self._make_segmenter(int(data["segment_size"]))
            if data.get("prune_hops", self.prune_hops) != self.prune_hops:
                raise InvalidCheckpoint(f"{path}: pruned with {data['prune_hops']} hops, this model with "
                                        f"{self.prune_hops}")  # fmt: skip
            self.best, self.probe = data.get("best"), data.get("probe")
        except (KeyError, AttributeError, RuntimeError, ValueError, TypeError) as exc:
            raise InvalidCheckpoint(f"{path}: cannot resume from it ({type(exc).__name__}: {exc})") from None


def _checkpoint_writer(
    run_dir: str | Path | RunDir | None, comm: Comm | None = None
) -> tuple[Path | None, Callable[[dict[str, Any]], Path | None] | None]:
    """The checkpoint path of ``run_dir`` and the function that writes it atomically (rank 0 only)."""
    if run_dir is None:
        return None, None
    writer = comm is None or comm.rank == 0
    if isinstance(run_dir, RunDir):
        return run_dir.checkpoint, (lambda state: run_dir.save_checkpoint(tagged(state)) if writer else None)
    ckpt = checkpoint_path(run_dir)
    return ckpt, (lambda state: save_checkpoint(ckpt, state) if writer else None)
