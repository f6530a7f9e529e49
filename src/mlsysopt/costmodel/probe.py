"""``one_step``: a trainer after a few training steps on one graph -- what the memory and step-time experiments
(the GST benchmark's memory part, the demo's memory figure) measure, with nothing pruned and every configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlsysopt.costmodel.data.record import GraphRecord, InMemoryDataset
from mlsysopt.costmodel.train_config import TrainConfig

if TYPE_CHECKING:
    from mlsysopt.costmodel.trainer import Trainer


def one_step(record: GraphRecord, mode: str, segment_size: int, seed: int = 0, steps: int = 1, k: int = 1) -> Trainer:
    """A trainer after ``steps`` training steps on ``record`` with all its configurations (memory experiments).

    ``trainer.history[-1]["peak_step_mb"]`` is the last step's peak tensor memory and ``["epoch_s"]`` its time
    (the first step of a table mode also fills the table; later steps read it); the model has the task's defaults,
    ``k`` segments get gradients and nothing is pruned (the graph's size is what is measured).

    Args:
        record: The graph, trained on with all its configurations.
        mode: GNN training mode (``full``, ``gst``, ``gst+e``, ``gst+ef``, ``gst+efd``).
        segment_size: Nodes per segment.
        seed: Seed.
        steps: Training steps (epochs over the single graph), >= 1.
        k: Segments that get gradients per step.

    Returns:
        Trainer: The trainer; ``history[-1]`` holds ``peak_step_mb`` and ``epoch_s`` of the last step.

    Raises:
        InvalidOption: For an invalid mode or size.
    """
    # deferred: imports pandas, psutil, pyarrow, torch_geometric
    from mlsysopt.costmodel.model import ModelConfig

    # deferred: imports pandas, psutil, pyarrow, torch_geometric
    from mlsysopt.costmodel.trainer import Trainer

    tc = TrainConfig(mode=mode, segment_size=segment_size, epochs=steps, finetune_epochs=0, seed=seed, k=k,
                     prune_hops=None, measure_memory=1, configs_per_graph=max(2, record.num_configs))  # fmt: skip
    trainer = Trainer(ModelConfig.for_task(record.task), tc)
    trainer.fit(InMemoryDataset([record]))
    return trainer
