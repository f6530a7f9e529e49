"""A real multi-node Ray cluster made of local processes, on loopback addresses only (tests and benchmarks).

``LocalRayCluster(nodes=2)`` runs ``ray start --head`` and ``ray start --address`` (one process per node, each
with ``--block`` so that stopping it stops everything it started). Each node gets its own loopback IP
(127.A.B.2, 127.A.B.3, ...; Ray would rewrite 127.0.0.1 to the machine's network address), each cluster a random
127.A.B prefix and its own temp folder, so several clusters can run side by side and nothing is ever addressed
but loopback. Token authentication is on, with a fresh token per cluster, exported to this process's environment
for the drivers it starts. The worker nodes start together, as soon as the head's GCS takes connections.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mlsysopt.errors import MlsysoptError
from mlsysopt.ports import free_port

START_TIMEOUT_S = 60.0
#: Seconds a stopped node's raylet gets to leave the cluster after SIGTERM, then `ray start` (which ignores it) gets.
STOP_WAIT_S, STOP_GRACE_S = 20.0, 1.0


def _name(proc: object) -> str:
    """A process's name, or "" once it is gone."""
    import psutil  # deferred: psutil comes with Ray, an optional extra

    try:
        return proc.name()  # type: ignore[attr-defined,no-any-return]
    except psutil.Error:
        return ""


def _ray_cli() -> str:
    exe = Path(sys.executable).with_name("ray")
    if exe.exists():
        return str(exe)
    found = shutil.which("ray")
    if found is None:
        raise MlsysoptError("the `ray` command is not installed (pip install 'mlsysopt[ray]')")
    return found


@dataclass
class RayNode:
    """One `ray start --block` process and the loopback IP its node uses."""

    ip: str
    process: subprocess.Popen
    log: Path


@dataclass
class LocalRayCluster:
    """A head and ``nodes - 1`` worker nodes on this machine; ``address`` is the head's ``IP:PORT``.

    Nothing starts until :meth:`start`; stop it with :meth:`stop` (or use it as a context manager).

    Args:
        nodes: Ray nodes, the head included (>= 1).
        cpus_per_node: CPUs each node offers (>= 1).
        object_store_mb: Object-store memory of each node, in MiB.
        pythonpath: Folders prepended to the nodes' PYTHONPATH.
        prefix: The loopback ``127.A.B`` prefix of the node IPs (random by default).
        started: The nodes started so far (filled by :meth:`start`; leave empty).
        lean: Leave out the autoscaler monitor and the log monitor (a fixed cluster of tests and benchmarks).

    Raises:
        MlsysoptError: If ``nodes`` or ``cpus_per_node`` is below 1.
    """

    nodes: int = 2
    cpus_per_node: int = 1
    object_store_mb: int = 256
    #: Folders prepended to the nodes' PYTHONPATH (where the task functions' modules live, if not installed).
    pythonpath: tuple[str, ...] = ()
    prefix: str = field(default_factory=lambda: f"127.{secrets.randbelow(200) + 20}.{secrets.randbelow(250) + 1}")
    started: list[RayNode] = field(default_factory=list)
    #: A fixed cluster needs no autoscaler monitor and no log forwarding (workers' prints stay in the node logs
    #: under ``temp_dir``): two Python processes fewer per head, one per node, ~1.2 s of CPU each start.
    lean: bool = True

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.cpus_per_node < 1:
            raise MlsysoptError("a local Ray cluster needs >= 1 node and >= 1 CPU per node")
        self.token = secrets.token_hex(16)
        self.temp_dir = Path(tempfile.mkdtemp(prefix="msray-", dir="/tmp"))
        self.head_ip = f"{self.prefix}.2"
        self.port = free_port(self.head_ip)
        self._next_ip = 3

    @property
    def address(self) -> str:
        """``HOST:PORT`` of the head (what ``--address`` takes)."""
        return f"{self.head_ip}:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment for the cluster's processes and its drivers (its token, ``pythonpath`` first)."""
        env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}
        if self.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join([*self.pythonpath, *filter(None, [env.get("PYTHONPATH")])])
        return env

    def _launch(self, ip: str, head: bool, cpus: int) -> RayNode:
        """Start one node's ``ray start --block`` (recorded in :attr:`started` at once, so :meth:`stop` ends it)."""
        log = self.temp_dir / f"node-{ip}.log"
        cmd = [_ray_cli(), "start", "--block", f"--node-ip-address={ip}", f"--num-cpus={cpus}"]
        cmd += [f"--object-store-memory={self.object_store_mb * 2**20}", "--disable-usage-stats"]
        cmd += [f"--dashboard-agent-listen-port={free_port(ip)}", f"--runtime-env-agent-port={free_port(ip)}"]
        cmd += [f"--metrics-export-port={free_port(ip)}"]
        if self.lean:
            cmd += ["--include-log-monitor=false"]
        if head:
            cmd += ["--head", f"--port={self.port}", "--include-dashboard=false", f"--temp-dir={self.temp_dir}"]
            cmd += [f"--ray-client-server-port={free_port(ip)}"]
            cmd += ["--no-monitor"] if self.lean else []
        else:
            cmd += [f"--address={self.address}"]
        with log.open("w") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=self.env(), start_new_session=True)
        node = RayNode(ip, proc, log)
        self.started.append(node)
        return node

    def _wait(self, node: RayNode, ready: Callable[[], bool], what: str) -> None:
        """Wait until ``ready()``; a node that exits or takes longer than :data:`START_TIMEOUT_S` is stopped and
        one MlsysoptError with its log's tail."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            if node.process.poll() is not None or time.monotonic() > deadline:
                self._stop_node(node)
                self.started.remove(node)
                tail = node.log.read_text(errors="replace")[-800:]
                raise MlsysoptError(
                    f"ray start on {node.ip} failed before {what} (exit {node.process.returncode}); log tail: {tail}"
                )
            time.sleep(0.1)

    def _wait_started(self, node: RayNode) -> RayNode:
        self._wait(node, lambda: "Ray runtime started" in node.log.read_text(errors="replace"), "it started")
        return node

    def _gcs_listening(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection((self.head_ip, self.port), timeout=0.5):
            return True
        return False

    def start(self) -> LocalRayCluster:
        """Start the head and the worker nodes; export the token for drivers in this process (until stop).

        The worker nodes start together as soon as the head's GCS takes connections (the head's raylet and agents
        start meanwhile), not one after another once the head is up; one that fails to join then (Ray gives a
        raylet 30 s to register, which a loaded machine can exceed) is started once more, on its own.
        """
        self._saved_env = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = self.token
        try:
            head = self._launch(self.head_ip, head=True, cpus=self.cpus_per_node)
            self._wait(head, self._gcs_listening, "its GCS took connections")
            workers = [self._launch(self._new_ip(), head=False, cpus=self.cpus_per_node) for _ in range(self.nodes - 1)]
            self._wait_started(head)
            for node in workers:
                try:
                    self._wait_started(node)
                except MlsysoptError:  # it could not join while the head started beside it (a busy machine): alone
                    self.add_node()
        except BaseException:
            self.stop()
            raise
        return self

    def _new_ip(self) -> str:
        ip = f"{self.prefix}.{self._next_ip}"
        self._next_ip += 1
        return ip

    def add_node(self, cpus: int | None = None) -> RayNode:
        """Start one more worker node (its own loopback IP) and wait until it has joined."""
        return self._wait_started(self._launch(self._new_ip(), head=False, cpus=cpus or self.cpus_per_node))

    def worker_nodes(self) -> list[RayNode]:
        """The running worker nodes (not the head), oldest first."""
        return [n for n in self.started if n.ip != self.head_ip and n.process.poll() is None]

    def remove_node(self, node: RayNode, hard: bool = True) -> None:
        """Take a worker node away (SIGKILL of every process it started when ``hard``, as a machine would die)."""
        self._stop_node(node, sig=signal.SIGKILL if hard else signal.SIGTERM)
        self.started.remove(node)

    def kill_head(self) -> None:
        """Kill the head node's processes (the cluster is gone for its drivers)."""
        for node in [n for n in self.started if n.ip == self.head_ip]:
            self._stop_node(node, sig=signal.SIGKILL)
            self.started.remove(node)

    @staticmethod
    def _stop_node(node: RayNode, sig: int = signal.SIGTERM, wait: float = 20.0) -> None:
        """Signal the node's whole process tree (raylet, workers mid-task, agents), then reap ``ray start``.

        Args:
            node: the node.
            sig: SIGTERM (the raylet leaves the cluster cleanly) or SIGKILL (a machine that dies).
            wait: seconds the raylet gets to leave (a head node's processes ignore SIGTERM: it needs none).
        """
        import psutil  # deferred: psutil comes with Ray, an optional extra

        try:
            tree = [psutil.Process(node.process.pid), *psutil.Process(node.process.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        with contextlib.suppress(ProcessLookupError):  # the node's processes share its session
            os.killpg(node.process.pid, sig)
        for proc in tree:  # workers may have left the session: signal each one as well
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        # the raylet and its workers leave the cluster cleanly on SIGTERM (the head then stops counting the node at
        # once); `ray start --block` itself does not exit on it, so it is killed once the others are gone
        raylets = [p for p in tree if _name(p) == "raylet"]
        psutil.wait_procs(raylets, timeout=wait)
        alive = [p for p in tree[1:] if p.is_running()]
        try:
            node.process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            for proc in [*alive, *tree[:1]]:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            node.process.wait(timeout=20)

    def stop(self) -> None:
        """Stop every node (workers first) and remove the temp folder."""
        for node in sorted(self.started, key=lambda n: n.ip == self.head_ip):
            self._stop_node(node, wait=STOP_GRACE_S if node.ip == self.head_ip else STOP_WAIT_S)
        self.started.clear()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        for key, value in getattr(self, "_saved_env", {}).items():  # a cluster started earlier gets its token back
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def __enter__(self) -> LocalRayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
