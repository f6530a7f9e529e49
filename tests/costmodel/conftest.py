"""Fixtures shared by the cost-model tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mlsysopt.costmodel.trainer import TrainConfig


@pytest.fixture(scope="module")
def tc(request: pytest.FixtureRequest) -> Callable[..., TrainConfig]:
    """A small training config: ``tc(**kw)`` is ``TrainConfig(**{**TC_BASE, **kw})``, with the ``TC_BASE`` dict of
    the test module asking for it (each module keeps the small base its tests are about)."""
    from mlsysopt.costmodel.trainer import TrainConfig

    base = dict(request.module.TC_BASE)

    def small_config(**kw: object) -> TrainConfig:
        return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]

    return small_config
