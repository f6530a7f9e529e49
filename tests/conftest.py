"""Fixtures shared by every test package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny tensors: torch's intra-op threads only add contention on a busy 2-core box (100x slower seen)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[object]:
    """A real 2-node Ray cluster of local processes (head + one worker node, 1 CPU each), on loopback only.

    Started once per test session (per xdist worker; the Ray tests share one ``xdist_group`` so one worker runs
    them all) and stopped afterwards. Tests that break a cluster (remove a node, kill the head) start their own.
    """
    from mlsysopt.runtime import LocalRayCluster  # Ray is a tested dependency: no skip when it is missing

    here = Path(__file__).parent
    cluster = LocalRayCluster(nodes=2, cpus_per_node=1, pythonpath=(str(here / "runtime"),)).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[object]:
    """A real PostgreSQL server of this machine's Debian package: a throwaway cluster on a loopback port and a Unix
    socket, started once per test session (per xdist worker; the store's server tests share one ``xdist_group``)
    and stopped afterwards. Its ``url`` and ``socket_url`` reach the database; tests use their own study names."""
    from mlsysopt.store.local_postgres import LocalPostgres  # PostgreSQL is a tested dependency: no skip

    server = LocalPostgres(durable=False).start()
    try:
        yield server
    finally:
        server.stop()
