"""The LSTM controller: shapes, valid samples, consistent log-probabilities, and REINFORCE that actually learns."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_methods import FakeSpace

from mlsysopt.nas.controller import Controller, Reinforce, sample_archs
from mlsysopt.nas.spaces.base import Arch


def test_sample_shapes_and_ranges() -> None:
    ctrl = Controller([3, 2, 5, 4], hidden=16)
    gen = torch.Generator().manual_seed(0)
    choices, logp, ent = ctrl.sample(4, batch=64, generator=gen)
    assert choices.shape == (64, 4) and logp.shape == (64,) and ent.shape == (64,)
    for i, n in enumerate([3, 2, 5, 4]):
        assert int(choices[:, i].min()) >= 0 and int(choices[:, i].max()) < n
    assert bool((logp <= 0).all()) and bool((ent > 0).all())
    # a near-uniform start: entropy close to the maximum, sum of log(n)
    assert float(ent.detach().mean()) == pytest.approx(math.log(3 * 2 * 5 * 4), rel=0.05)


def test_prefix_sampling_for_fewer_blocks_and_evaluate_matches_sample() -> None:
    ctrl = Controller([3, 3, 3, 3, 3], hidden=16)
    gen = torch.Generator().manual_seed(1)
    short, logp, ent = ctrl.sample(3, batch=8, generator=gen)
    assert short.shape == (8, 3)
    logp2, ent2 = ctrl.evaluate(short.tolist())
    assert torch.allclose(logp, logp2, atol=1e-6) and torch.allclose(ent, ent2, atol=1e-6)
    # sequences of different lengths in one batch (architectures of different stages)
    mixed = [[0, 1, 2], [2, 1, 0, 1, 2]]
    with torch.no_grad():
        lp, _ = ctrl.evaluate(mixed)
        assert float(lp[0]) == pytest.approx(float(ctrl.evaluate([mixed[0]])[0][0]), abs=1e-6)
    with pytest.raises(ValueError):
        ctrl.sample(6)


def test_sample_archs_respects_space_decisions() -> None:
    space = FakeSpace()
    ctrl = Controller(space.decisions(space.max_blocks), hidden=16)
    gen = torch.Generator().manual_seed(2)
    for blocks in (1, 2):
        archs = sample_archs(ctrl, space.decisions(blocks), blocks, 50, gen)
        assert len(archs) == 50 and all(a.blocks == blocks for a in archs)
        for a in archs:
            space.check(a)


def test_seed_makes_init_deterministic_without_touching_global_rng() -> None:
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, b = Controller([3, 3], seed=7), Controller([3, 3], seed=7)
    assert torch.rand(1) == before  # building controllers did not consume the global generator
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_reinforce_raises_probability_of_the_best_architecture() -> None:
    """A real learning test: on the fake space's smooth reward, the best architecture becomes far more likely."""
    space = FakeSpace(seed=4)
    opts = space.decisions(space.max_blocks)
    best = max((a for a in space.all_archs() if a.blocks == 2), key=space.true_perf)
    ctrl = Controller(opts, hidden=32, seed=0)
    pg = Reinforce(ctrl, lr=0.05, entropy=1e-4)
    gen = torch.Generator().manual_seed(0)
    start = float(ctrl.evaluate([best.choices])[0][0].detach())
    rewards = []
    for _ in range(60):
        archs = sample_archs(ctrl, opts, 2, 16, gen)
        r = [space.true_perf(a) for a in archs]
        rewards.append(np.mean(r))
        pg.update([a.choices for a in archs], r)
    end = float(ctrl.evaluate([best.choices])[0][0].detach())
    assert start == pytest.approx(math.log(1 / np.prod(opts)), abs=0.5)
    assert end - start > math.log(20), f"log-prob of the best arch only went {start:.2f} -> {end:.2f}"
    assert np.mean(rewards[-10:]) > np.mean(rewards[:10]) + 0.05


def test_reinforce_state_round_trip() -> None:
    ctrl = Controller([3, 3], hidden=8)
    pg = Reinforce(ctrl, lr=0.1)
    pg.update([(0, 1), (2, 2)], [1.0, 0.0])
    state = pg.state_dict()
    other = Reinforce(Controller([3, 3], hidden=8, seed=5), lr=0.1)
    other.load_state_dict(state)
    pg.update([(1, 1)], [0.5])
    other.update([(1, 1)], [0.5])
    for p, q in zip(ctrl.parameters(), other.controller.parameters(), strict=True):
        assert torch.equal(p, q)
    assert other.baseline == pg.baseline and other.steps == 2
    assert Arch((0, 1), 1) == Arch((0, 1), 1)


def test_prefixes_are_kept_and_the_rest_is_sampled() -> None:
    ctrl = Controller([3, 3, 3, 3], hidden=8)
    gen = torch.Generator().manual_seed(3)
    prefixes = [(2, 1), (0,), (), (1, 1, 1)]
    choices, _, _ = ctrl.sample(4, batch=4, generator=gen, prefixes=prefixes)
    for row, p in zip(choices.tolist(), prefixes, strict=True):
        assert tuple(row[: len(p)]) == p
    archs = sample_archs(ctrl, [3, 3, 3, 3], 2, 200, gen, prefixes=[(2, 2)] * 100)
    assert all(a.choices[:2] == (2, 2) for a in archs[:100])
    assert len({a.choices[:2] for a in archs[100:]}) > 3  # rows without a prefix are free
