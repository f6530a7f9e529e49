"""Free TCP ports for the servers mlsysopt starts (Ray, Ray Serve, PostgreSQL), picked where nobody takes them first.

Asking the OS for port 0 returns a port from Linux's ephemeral range (32768–60999), and the port is free only until
the socket closes: between that check and the server's own ``bind`` any process that opens a connection or asks for
port 0 may be handed the same number. Ray's dozen processes do exactly that while they start, so a Ray Serve proxy
told to listen on such a port sometimes finds it taken ("Failed to bind to address"). Ports are therefore drawn at
random from a range that neither the OS nor Ray hands out by itself (Ray's workers use 10002–19999).
"""

from __future__ import annotations

import random
import socket

#: Ports drawn from here: above Ray's worker ports (10002–19999), below Linux's ephemeral range (32768–60999).
PORT_RANGE = (20000, 32000)
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now, outside the ranges the OS and Ray hand out, never the same twice in a process.

    Args:
        host: The address the server will listen on.

    Returns:
        The port number (the OS's own pick if 200 random draws all found a port taken).
    """
    rng = random.Random()  # seeded from the OS: parallel processes do not walk one sequence
    for _ in range(200):
        port = rng.randrange(*PORT_RANGE)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
