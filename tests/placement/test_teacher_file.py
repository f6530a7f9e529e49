"""teacher.pt, the teacher's samples of a placement training, is read back by the run's own --resume (weights-only:
tensors and plain data), so a training stopped during imitation continues instead of refusing its own file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mlsysopt.io import load_torch, save_torch_atomic
from mlsysopt.placement.config import TrainConfig
from mlsysopt.placement.imitation import TeacherSample
from mlsysopt.placement.train_search import _teacher_data
from mlsysopt.runtime import SerialExecutor

CFG = {"imitation_problems": 2, "teacher_steps": 2, "imitation_epochs": 1, "updates": 1, "episodes_per_update": 1}


def test_the_teacher_file_holds_plain_tensors_and_reads_back_the_same_samples(tmp_path: Path) -> None:
    cfg = TrainConfig(**CFG)
    first = _teacher_data(cfg, tmp_path / "policy.pt", SerialExecutor())
    path = tmp_path / "policy.teacher.pt"
    saved = load_torch(path, RuntimeError)  # weights-only: refuses anything but tensors and plain data
    assert saved["problems"] == 2 and len(saved["samples"]) == len(first) > 0
    again = _teacher_data(cfg, tmp_path / "policy.pt", SerialExecutor())
    for a, b in zip(first, again, strict=True):
        assert a.seed == b.seed
        for key in ("placement", "node", "kind", "target"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key))


def test_an_unreadable_teacher_file_of_an_older_version_is_collected_again(tmp_path: Path) -> None:
    cfg = TrainConfig(**CFG)
    path = tmp_path / "policy.teacher.pt"
    old = TeacherSample(0, np.zeros(2, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1))
    torch.save({"problems": 2, "seed": cfg.seed, "samples": [old]}, path)  # as earlier versions pickled them
    samples = _teacher_data(cfg, tmp_path / "policy.pt", SerialExecutor())
    assert samples and isinstance(load_torch(path, RuntimeError)["samples"][0]["placement"], torch.Tensor)
    save_torch_atomic(path, {"problems": 3, "seed": cfg.seed, "samples": []})  # another training's: not reused
    assert len(_teacher_data(cfg, tmp_path / "policy.pt", SerialExecutor())) == len(samples)
