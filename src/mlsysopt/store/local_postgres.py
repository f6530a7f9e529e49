"""A throwaway PostgreSQL server on this machine (loopback and a Unix socket), for tests, benchmarks and trying out.

Debian's ``postgresql`` package provides the binaries (``/usr/lib/postgresql/*/bin``); ``make system-packages``
installs it. :class:`LocalPostgres` makes a fresh cluster in a temporary folder (``initdb``, trust authentication
for the local user ``mlsysopt`` only: it listens on 127.0.0.1 and on a socket in that folder), starts it on a free
port, creates the database and, on :meth:`~LocalPostgres.stop`, stops it and removes the folder. PostgreSQL
refuses to run as root, so under root the server runs as the ``postgres`` system user (or ``nobody``)::

    with LocalPostgres() as pg:
        mlsysopt nas search ... --storage {pg.url}
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from mlsysopt.errors import StoreError
from mlsysopt.ports import free_port

USER = "mlsysopt"


def pg_bin() -> Path:
    """The folder of PostgreSQL's server binaries (the newest Debian version, else ``pg_ctl`` on the PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).parent
    raise StoreError("PostgreSQL's server is not installed (apt-get install postgresql, or 'make system-packages')")


class LocalPostgres:
    """A private PostgreSQL server; ``url`` (TCP on loopback) and ``socket_url`` (its Unix socket) reach it.

    Args:
        database: the database created for the store.
        durable: keep PostgreSQL's fsync on (off makes a faster, crash-unsafe server for tests of logic only).
    """

    def __init__(self, database: str = "mlsysopt", durable: bool = True) -> None:
        self.database, self.durable = database, durable
        self.port = 0
        self.folder: Path | None = None
        self.run_as: str | None = None

    @property
    def url(self) -> str:
        """``postgresql://mlsysopt@127.0.0.1:PORT/DB``."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{self.database}"

    @property
    def socket_url(self) -> str:
        """The same database through the Unix socket in the server's folder."""
        return f"postgresql://{USER}@/{self.database}?host={self.folder}&port={self.port}"

    def _run(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        full = [*(("runuser", "-u", self.run_as, "--") if self.run_as else ()), *cmd]
        proc = subprocess.run(full, capture_output=True, text=True, timeout=120, cwd="/")
        if proc.returncode != 0:
            tail = " ".join((proc.stderr or proc.stdout).split())[-400:]
            raise StoreError(f"PostgreSQL: '{' '.join(cmd[:2])}' failed ({tail})")
        return proc

    def start(self) -> LocalPostgres:
        """initdb, start on a free loopback port, create the database."""
        bins = pg_bin()
        self.folder = Path(tempfile.mkdtemp(prefix="mlsysopt-pg-"))
        if os.geteuid() == 0:
            self.run_as = next((u for u in ("postgres", "nobody") if _user_exists(u)), None)
            if self.run_as is None:
                raise StoreError("PostgreSQL does not run as root and this machine has no postgres or nobody user")
            entry = pwd.getpwnam(self.run_as)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
        data = self.folder / "data"
        try:
            self._run(str(bins / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-locale")
            self.port = free_port()
            opts = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c max_connections=100"
            if not self.durable:
                opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            log = self.folder / "server.log"
            self._run(str(bins / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts, "-w", "-t", "60", "start")
            self._run(str(bins / "createdb"), "-h", str(self.folder), "-p", str(self.port), "-U", USER, self.database)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder."""
        if self.folder is None:
            return
        data = self.folder / "data"
        if (data / "postmaster.pid").exists():
            with contextlib.suppress(StoreError):
                self._run(str(pg_bin() / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
