"""A user's ``Blocks(min, max)``: the block count is searched by every method, not only by those that grow stage by
stage (one to three layers are three kinds of network; BANANAS, TPE, evolution, local and random search and
REINFORCE drew only ``max_blocks`` architectures before)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mlsysopt.nas import Arch, Blocks, Space, Study, method_class
from mlsysopt.nas.constraints import Constraints


def _space(min_blocks: int = 1, max_blocks: int = 3) -> Space:
    return Space(knobs={"lr": [0.1, 0.01]}, blocks=Blocks({"width": [8, 16, 32], "act": ["relu", "tanh"]},
                 min=min_blocks, max=max_blocks), name="depth")  # fmt: skip


def _changed(a: Arch, b: Arch) -> int:
    return sum(x != y for x, y in zip(a.choices, b.choices, strict=False))


def test_the_block_count_is_a_choice_only_where_the_space_says_so() -> None:
    assert _space().depth_is_a_choice and not _space(2, 2).depth_is_a_choice
    rng = np.random.default_rng(0)
    assert {_space().sample(rng).blocks for _ in range(60)} == {1, 2, 3}  # a count drawn first, uniformly
    assert {_space(2, 2).sample(rng).blocks for _ in range(20)} == {2}
    assert _space().sample(rng, blocks=2).blocks == 2  # an asked count is kept (EPNAS's and PNAS's stages)


def test_a_mutation_changes_one_decision_or_the_block_count_by_one() -> None:
    space, rng = _space(), np.random.default_rng(1)
    parent = Arch((0, 1, 1, 2, 0), 2)  # lr, then width and act per block
    counts = {1: 0, 2: 0, 3: 0}
    for _ in range(300):
        child = space.mutate(parent, rng)
        space.check(child)
        counts[child.blocks] += 1
        if child.blocks == parent.blocks:
            assert _changed(parent, child) == 1
        else:  # a block dropped from the end or appended: the shared decisions are the parent's
            assert abs(child.blocks - parent.blocks) == 1 and _changed(parent, child) == 0
    assert counts[1] and counts[3] and counts[2] > counts[1] + counts[3]
    # at the ends the count can only grow or shrink; a fixed-depth space never changes it
    assert all(space.mutate(Arch((0, 0, 0), 1), rng).blocks in (1, 2) for _ in range(50))
    fixed = _space(2, 2)
    assert all(fixed.mutate(parent, rng).blocks == 2 for _ in range(50))


def test_neighbours_with_depth_drop_or_repeat_the_last_block() -> None:
    space = _space()
    arch = Arch((1, 2, 0), 1)
    same = space.neighbours(arch)
    assert {a.blocks for a in same} == {1} and len(same) == 1 + 2 + 1  # lr, width, act: one edit each
    deep = space.neighbours(arch, depth=True)
    assert deep[: len(same)] == same and deep[len(same) :] == [Arch((1, 2, 0, 2, 0), 2)]
    middle = Arch((1, 2, 0, 1, 1), 2)
    assert {a for a in space.neighbours(middle, depth=True) if a.blocks != 2} == {arch, Arch((1, 2, 0, 1, 1, 1, 1), 3)}
    assert all(a.blocks == 2 for a in _space(2, 2).neighbours(middle, depth=True))


def _value(params: dict[str, Any], seed: int = 0) -> float:
    """Best with one block of width 32 and lr 0.01: every extra layer costs more than any width gains."""
    widths = [b["width"] for b in params["blocks"]]
    return 1.0 - 0.2 * (len(widths) - 1) + widths[0] / 1000 + (0.05 if params["lr"] == 0.01 else 0.0)


@pytest.mark.parametrize("method", ["bananas", "tpe", "evolution", "local_search", "random", "reinforce"])
def test_a_user_search_tries_every_depth_and_finds_the_one_layer_optimum(method: str) -> None:
    study = Study(_space(), method=method, seed=0).optimize(_value, 30)
    depths = {len(t.params["blocks"]) for t in study.trials}
    assert depths == {1, 2, 3}, f"{method} tried depths {depths}"
    assert len(study.best_params["blocks"]) == 1, f"{method}'s best: {study.best_params}"


def test_tpe_on_a_conditional_depth_resumes_to_the_same_search() -> None:
    space, cons = _space(), Constraints()

    def run(searcher: Any, n: int) -> list[Arch]:
        out = []
        for _ in range(n):
            (arch,) = searcher.ask(1)
            searcher.tell([_evaluation(space, arch)])
            out.append(arch)
        return out

    whole = run(method_class("tpe")(space, cons, budget=20, seed=4), 20)
    first = method_class("tpe")(space, cons, budget=20, seed=4)
    head = run(first, 12)
    again = method_class("tpe")(space, cons, budget=20, seed=4)
    again.load_state_dict(first.state_dict())
    assert head + run(again, 8) == whole
    assert {a.blocks for a in whole} == {1, 2, 3}


def _evaluation(space: Space, arch: Arch) -> Any:
    from mlsysopt.nas import Evaluation

    value = _value(space.params(arch))
    return Evaluation(arch, value, value, {}, cost_s=0.0)


def _told(searcher: Any, space: Space, rounds: int, n: int = 4) -> list[Arch]:
    out = []
    for _ in range(rounds):
        archs = searcher.ask(n)
        searcher.tell([_evaluation(space, a) for a in archs])
        out += archs
    return out


def _counts(searcher: Any, n: int = 400) -> np.ndarray:
    """How often the controller's first decision picks each block count, over ``n`` fresh samples."""
    first = searcher.policy.controller.options[0]
    picks = [a.choices[0] for a in searcher.policy.sample([first], 1, n)]
    return np.bincount(picks, minlength=first) / n


def test_reinforce_learns_the_block_count_with_the_decisions() -> None:
    space = _space()
    searcher = method_class("reinforce")(space, Constraints(), budget=200, seed=0)
    before = _counts(searcher)
    assert np.all(np.abs(before - 1 / 3) < 0.1)  # near-uniform at the start (ENAS's initialisation)
    archs = _told(searcher, space, 15)  # 60 evaluations: the 12 one-block architectures are not all seen yet
    after = _counts(searcher)
    # each block past the first costs 0.2: the policy moves to one block and away from three (uniform stays 1/3)
    assert after[0] > 0.5 and after[2] < 0.1, (before, after)
    assert {a.blocks for a in archs} == {1, 2, 3}


def test_reinforce_resumes_to_the_same_search_and_reads_a_checkpoint_of_uniform_counts() -> None:
    space, cons = _space(), Constraints()
    whole = _told(method_class("reinforce")(space, cons, budget=40, seed=3), space, 10)
    first = method_class("reinforce")(space, cons, budget=40, seed=3)
    head = _told(first, space, 6)
    again = method_class("reinforce")(space, cons, budget=40, seed=3)
    again.load_state_dict(first.state_dict())
    assert head + _told(again, space, 4) == whole
    # a search written before the count was learned (no "count_learned"): it goes on drawing the count uniformly
    cls = method_class("reinforce")
    old = cls(space, cons, budget=40, seed=3, config=cls.Config(learn_count=False))  # the ablation knob
    _told(old, space, 3)
    state = {k: v for k, v in old.state_dict().items() if k != "count_learned"}
    resumed = method_class("reinforce")(space, cons, budget=40, seed=3)
    resumed.load_state_dict(state)
    assert not resumed.count_learned and resumed.policy.controller.options == old.policy.controller.options
    assert {a.blocks for a in _told(resumed, space, 6)} == {1, 2, 3}
