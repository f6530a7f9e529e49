"""PeakMemory: counts tensor storages allocated inside the block, once each, freed when PyTorch frees them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlsysopt.costmodel.memory import PeakMemory, host_rss_mb

MB = 1 << 20


def test_counts_an_allocation_and_its_release():
    with PeakMemory() as pm:
        a = torch.ones(MB // 4)  # 1 MiB of float32
        b = torch.ones(MB // 2)  # 2 MiB
        del a
        c = torch.ones(MB // 4)
    assert pm.peak_mb == pytest.approx(3.0, abs=0.01)
    assert pm.end_mb == pytest.approx(3.0, abs=0.01)  # b and c are still alive
    del b, c


def test_views_and_in_place_results_are_not_counted_twice():
    with PeakMemory() as pm:
        x = torch.zeros(MB // 4)
        v = x.view(2, -1)[:, ::2]
        x.add_(1.0)
        v.mul_(2.0)
    assert pm.peak_mb == pytest.approx(1.0, abs=0.01)


def test_tensors_that_existed_before_and_numpy_wrappers_do_not_count():
    big = torch.zeros(MB)
    arr = np.zeros(MB, dtype=np.float32)
    with PeakMemory() as pm:
        big.add_(1.0)
        wrapped = torch.from_numpy(arr)  # shares numpy's memory: the host's copy
        copied = wrapped.to("cpu", copy=True)  # a real copy: counts, as on an accelerator
    assert pm.peak_mb == pytest.approx(4.0, abs=0.01)
    del copied


def test_backward_allocations_count_and_scale_with_size():
    def step(n: int) -> float:
        w = torch.randn(64, 64, requires_grad=True)
        x = torch.randn(n, 64)
        with PeakMemory() as pm:
            y = torch.relu(x @ w) @ w
            y.square().mean().backward()
        return pm.peak_mb

    small, large = step(2_000), step(20_000)
    assert large / small == pytest.approx(10.0, rel=0.1)
    assert small > 3 * 2_000 * 64 * 4 / MB  # activations of the forward plus backward temporaries


def test_paused_blocks_and_disabled_meter_count_nothing():
    with PeakMemory() as pm:
        with pm.paused():
            kept = torch.ones(MB)
        small = torch.ones(MB // 4)
    assert pm.peak_mb == pytest.approx(1.0, abs=0.01)
    with PeakMemory(enabled=False) as off:
        more = torch.ones(MB)
    assert off.peak_mb == 0.0
    del kept, small, more


def test_host_rss_is_positive():
    assert host_rss_mb() > 1.0
