"""How a search stops and comes back: a wall-clock timeout, a lost executor (checkpoint kept), checkpoints spaced out
for long histories, and the best evaluation tracked across resumes."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from test_methods import FakeSpace, constraints

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas import Evaluation, get_method, read_checkpoint, run_search
from mlsysopt.runtime import Executor, ExecutorLost


def _key(history: list[Evaluation]) -> list[tuple]:
    return [(ev.arch, ev.perf, ev.ok) for ev in history]


class SlowSpace(FakeSpace):
    """FakeSpace whose evaluations take ``seconds`` each."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def evaluate(self, arch: Any, seed: int = 0) -> Evaluation:
        time.sleep(self.seconds)
        return super().evaluate(arch, seed)


def test_a_timeout_stops_before_the_next_batch_and_resume_finishes_like_an_uncut_search(tmp_path: Path) -> None:
    full = run_search(get_method("epnas", FakeSpace(), constraints(), budget=12, seed=4, warmup=3), workers=2)
    ckpt = tmp_path / "s.pt"
    cut = run_search(get_method("epnas", SlowSpace(0.05), constraints(), budget=12, seed=4, warmup=3), workers=2,
                     checkpoint=ckpt, timeout=0.12)  # fmt: skip
    assert cut.stopped == "timeout" and 2 <= len(cut.history) < 12 and len(cut.history) % 2 == 0
    assert cut.message.startswith("stopped by the timeout (0.12 s) after") and ckpt.exists()
    assert len(read_checkpoint(ckpt)["history"]) == len(cut.history)  # the stop is checkpointed
    zero = run_search(get_method("epnas", FakeSpace(), constraints(), budget=12, seed=4, warmup=3), workers=2,
                      checkpoint=tmp_path / "z.pt", timeout=0)  # fmt: skip
    assert zero.stopped == "timeout" and zero.history == [] and (tmp_path / "z.pt").exists()  # resumable even so
    for where in (ckpt, tmp_path / "z.pt"):
        done = run_search(get_method("epnas", FakeSpace(), constraints(), budget=12, seed=4, warmup=3), workers=2,
                          checkpoint=where)  # fmt: skip
        assert done.stopped == "budget" and _key(done.history) == _key(full.history)
    with pytest.raises(MlsysoptError, match="timeout must be a finite number of seconds >= 0"):
        run_search(get_method("random", FakeSpace()), timeout=-1)


class LosingExecutor(Executor):
    """Evaluates in-process for ``good`` calls, then is gone for good (like a Ray cluster whose head died)."""

    def __init__(self, good: int) -> None:
        self.good, self.calls = good, 0

    def map(self, fn: Any, items: Any) -> list[Any]:
        self.calls += 1
        if self.calls > self.good:
            raise ExecutorLost("the Ray cluster at 10.0.0.5:6379 is gone")
        return [fn(x) for x in items]


@pytest.mark.parametrize("method", ["epnas", "evolution", "tpe"])
def test_a_lost_executor_stops_with_its_checkpoint_and_resume_gives_the_uncut_result(
    method: str, tmp_path: Path
) -> None:
    full = run_search(get_method(method, FakeSpace(), constraints(), budget=10, seed=1), workers=2)
    ckpt = tmp_path / "s.pt"
    with pytest.raises(ExecutorLost, match=r"10.0.0.5:6379 is gone; the search stopped: .*s\.pt keeps its first 4 "
                       r"evaluation\(s\), and running the same command with --resume continues it"):  # fmt: skip
        run_search(get_method(method, FakeSpace(), constraints(), budget=10, seed=1), LosingExecutor(2), workers=2,
                   checkpoint=ckpt)  # fmt: skip
    saved = read_checkpoint(ckpt)
    assert len(saved["history"]) == 4 and saved["failed"] == 0  # the lost batch is not recorded as failed
    resumed = run_search(get_method(method, FakeSpace(), constraints(), budget=10, seed=1), workers=2, checkpoint=ckpt)
    assert _key(resumed.history) == _key(full.history) and resumed.best.arch == full.best.arch
    with pytest.raises(ExecutorLost, match="stopped before its first checkpoint: run the command again"):
        run_search(
            get_method(method, FakeSpace(), budget=4), LosingExecutor(0), workers=2, checkpoint=tmp_path / "n.pt"
        )
    assert not (tmp_path / "n.pt").exists()


def test_checkpoints_of_a_long_fast_search_are_spaced_out_and_the_last_is_complete(tmp_path: Path) -> None:
    """Look-ups are much faster than rewriting a long history: not every batch is saved; the final save has all."""
    from mlsysopt.nas import search

    saves: list[int] = []
    real = search._Checkpoint.save

    def counting(self: Any, data: dict) -> None:
        saves.append(len(data["history"]))
        real(self, data)

    space = FakeSpace()
    n = len(space.all_archs())  # 27 + 243 = 270 distinct architectures
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(search._Checkpoint, "save", counting)
        mp.setattr(search, "CHECKPOINT_SPACING", 1e9)  # time never makes a save due: only the 5% growth does
        result = run_search(get_method("random", space, budget=n, seed=0), workers=1, checkpoint=tmp_path / "s.pt")
    assert len(result.history) > 200 and saves[-1] == len(result.history)
    assert saves[:20] == list(range(1, 21))  # a short history is saved after every batch
    assert len(saves) < 0.4 * len(result.history)  # then once it grew by 5%
    assert all(b - a >= 0.05 * b or b == saves[-1] for a, b in itertools.pairwise(saves))


def test_the_checkpoint_keeps_the_best_index_and_what_it_trained(tmp_path: Path) -> None:
    class TrainingSpace(FakeSpace):
        def evaluate(self, arch: Any, seed: int = 0) -> Evaluation:
            ev = super().evaluate(arch, seed)
            ev.trained = {"state_dict": {"w": torch.tensor([float(sum(arch.choices))])}}
            return ev

    ckpt = tmp_path / "s.pt"
    result = run_search(get_method("random", TrainingSpace(), constraints(), budget=9, seed=0), workers=3,
                        checkpoint=ckpt)  # fmt: skip
    best = read_checkpoint(ckpt)["best"]
    assert result.history[best["index"]] is result.best
    assert best["trained"]["state_dict"]["w"].item() == sum(result.best.arch.choices)
    assert all(ev.trained is None for ev in result.history)  # only the best's weights are kept, in the checkpoint
    more = run_search(get_method("random", TrainingSpace(), constraints(), budget=14, seed=0), workers=3,
                      checkpoint=ckpt)  # fmt: skip
    again = read_checkpoint(ckpt)["best"]
    assert more.history[again["index"]] is more.best
    assert again["trained"]["state_dict"]["w"].item() == sum(more.best.arch.choices)
