"""Ports for the servers mlsysopt starts: outside the ranges the OS and Ray hand out, free, never handed out twice."""

from __future__ import annotations

import socket
from pathlib import Path

from mlsysopt.ports import PORT_RANGE, free_port


def test_ports_are_free_outside_the_ephemeral_range_and_distinct() -> None:
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    for port in ports:
        assert PORT_RANGE[0] <= port < PORT_RANGE[1] and not lo <= port <= hi
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free when handed out
