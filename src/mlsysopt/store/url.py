"""Where the study store is: ``--storage URL``, ``MLSYSOPT_STORAGE``, or ``mlsysopt.db`` beside the run folders.

A storage spec is one of

* ``none`` (or ``off``): no store; runs write their folders only;
* ``sqlite:///PATH`` or a plain ``PATH`` (a folder means ``FOLDER/mlsysopt.db``): a SQLite file on a local disk;
* ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB`` (also ``postgresql+psycopg2://``, ``postgres://``, and
  ``?host=/socket/dir`` for a Unix socket): a PostgreSQL server, for a team or a cluster.

Parsing is cheap and touches nothing. The checks that look at the file system (a folder where the file should be,
a file that is not SQLite, SQLite on a network file system) are :func:`check_sqlite_path`; reaching a server is
:meth:`mlsysopt.store.Store.probe`. Messages name where the spec came from and never show a password.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from mlsysopt.errors import StoreError
from mlsysopt.text import mask_secrets

ENV = "MLSYSOPT_STORAGE"
DEFAULT_FILE = "mlsysopt.db"
OFF = ("none", "off")
SQLITE_MAGIC = b"SQLite format 3\x00"
#: File systems on which SQLite's locking is not reliable (their own documentation says so), by /proc type.
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ncpfs", "ceph", "glusterfs", "lustre", "gpfs",
              "beegfs", "fuse.sshfs", "fuse.s3fs", "fuse.rclone", "fuse.davfs2", "fuse.glusterfs", "fuse.juicefs",
              "fuse.gcsfuse", "fuse.blobfuse", "fuse.ceph", "fuse.cephfs", "davfs")  # fmt: skip
_POSTGRES = ("postgresql", "postgresql+psycopg2", "postgres")
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class StorageSpec:
    """A parsed storage spec: the SQLAlchemy URL (``""`` when off), its kind and, for SQLite, the file.

    ``source`` says where it came from (``--storage``, ``MLSYSOPT_STORAGE`` or ``the default store``), for messages.
    Build one with :func:`parse_storage` or :func:`resolve_storage`.

    Args:
        url: SQLAlchemy URL, password included (``""`` when off).
        kind: ``sqlite``, ``postgresql`` or ``none``.
        path: Absolute path of the SQLite file (None for the other kinds).
        source: Where the spec came from, for messages.
        timeout: Seconds a SQLite writer waits for the file's lock.
        beside: For the default store, the run folder it is beside (messages name the ``--out``).
    """

    url: str
    kind: str  # "sqlite" | "postgresql" | "none"
    path: Path | None = None
    source: str = "--storage"
    timeout: float = 60.0  # SQLite: seconds a writer waits for the file's lock (``sqlite:///F.db?timeout=S``)
    beside: str | None = None  # the default store: the run folder it is beside (messages name the --out)

    @property
    def enabled(self) -> bool:
        """Whether runs write to a store."""
        return self.kind != "none"

    @property
    def display(self) -> str:
        """The URL as messages show it: the password masked."""
        if self.kind == "postgresql":
            from sqlalchemy.engine import make_url  # deferred: SQLAlchemy loads only when a URL is parsed

            return make_url(self.url).render_as_string(hide_password=True)
        return self.url or "none"

    def where(self) -> str:
        """``--storage URL`` / ``MLSYSOPT_STORAGE=URL`` / ``the default store URL``, for the start of a message."""
        if self.source == ENV:
            return f"{ENV}={self.display}"
        if self.source == "--storage":
            return f"--storage {self.display}"
        if self.beside:
            return f"the study store beside --out {self.beside} ({self.path})"
        return f"the study store {self.display}"


def parse_storage(text: str, source: str = "--storage", cwd: Path | None = None) -> StorageSpec:
    """The :class:`StorageSpec` of ``text``; one :class:`StoreError` naming ``source`` when it is malformed.

    Parsing touches nothing but checks whether a plain path is an existing folder or file.

    Args:
        text: ``none``/``off``, ``sqlite:///PATH[?timeout=S]``, a plain path (a folder means ``FOLDER/mlsysopt.db``)
            or ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB``.
        source: Where ``text`` came from (``--storage``, ``MLSYSOPT_STORAGE``), for messages.
        cwd: Folder relative paths are resolved against (default: the current folder).

    Returns:
        The parsed spec.

    Raises:
        StoreError: If ``text`` is empty, has control characters, uses an unsupported scheme or option, names an
            in-memory SQLite database, or is a PostgreSQL URL without a server or database.
    """
    raw = str(text).strip()
    if raw.lower() in OFF:
        return StorageSpec("", "none", None, source)
    if not raw:
        raise StoreError(f"{source}: empty storage URL (use sqlite:///FILE, postgresql://USER@HOST/DB or none)")
    if _CONTROL.search(raw):
        shown = mask_secrets(raw).encode("unicode_escape").decode()
        raise StoreError(f"{source} {shown}: a storage URL has no control characters")
    base = Path.cwd() if cwd is None else cwd
    if "://" not in raw and not raw.startswith("sqlite:"):
        path = Path(raw).expanduser()
        path = path if path.is_absolute() else base / path
        if path.is_dir():
            path = path / DEFAULT_FILE
        elif not path.is_file() and path.suffix.lower() not in SQLITE_SUFFIXES:
            raise StoreError(
                f"{source} {raw}: not a storage URL, an existing folder or a SQLite file name (*.db); "
                "use sqlite:///FILE.db, postgresql://USER@HOST/DB or none"
            )
        return _sqlite(path, source)
    scheme = raw.split(":", 1)[0].lower()
    if scheme == "sqlite":
        rest = raw[len("sqlite:") :]
        if not rest.startswith("///"):
            raise StoreError(
                f"{source} {raw}: a SQLite URL is sqlite:///RELATIVE/PATH.db or sqlite:////ABSOLUTE/PATH.db"
            )
        name, _, query = rest[3:].partition("?")
        if not name or name == ":memory:" or name.startswith("file::memory:"):
            raise StoreError(f"{source} {raw}: an in-memory store is lost when the command ends; give a file")
        path = Path(name).expanduser()
        return _sqlite(path if path.is_absolute() else base / path, source, _timeout(query, f"{source} {raw}"))
    if scheme in _POSTGRES:
        return _postgres(raw, source)
    raise StoreError(
        f"{source} {mask_secrets(raw)}: unsupported storage scheme '{scheme}' (use sqlite:///FILE, "
        "postgresql://USER@HOST[:PORT]/DB or none)"
    )


def _timeout(query: str, where: str) -> float:
    """The ``timeout=S`` of a SQLite URL's query (the only option it takes), 60 s when absent."""
    timeout = 60.0
    for item in filter(None, query.split("&")):
        name, _, value = item.partition("=")
        if name != "timeout":
            raise StoreError(f"{where}: unknown SQLite URL option '{name}' (only timeout=SECONDS)")
        try:
            timeout = float(value)
        except ValueError:
            timeout = math.nan
        if not (math.isfinite(timeout) and 0 < timeout <= 86400):
            raise StoreError(f"{where}: timeout={value!r} must be a number of seconds, 0 < timeout <= 86400")
    return timeout


def _sqlite(path: Path, source: str, timeout: float = 60.0) -> StorageSpec:
    path = Path(os.path.abspath(path))
    url = f"sqlite:///{path}" + ("" if timeout == 60.0 else f"?timeout={timeout:g}")
    return StorageSpec(url, "sqlite", path, source, timeout)


def _postgres(raw: str, source: str) -> StorageSpec:
    from sqlalchemy.engine import make_url  # deferred: SQLAlchemy loads only when a URL is parsed
    from sqlalchemy.exc import ArgumentError  # deferred: SQLAlchemy loads only when a URL is parsed

    try:
        url = make_url(raw)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(f"{source} {mask_secrets(raw)}: not a valid PostgreSQL URL ({exc})") from None
    if url.drivername in ("postgres", "postgresql"):
        url = url.set(drivername="postgresql+psycopg2")
    if url.drivername != "postgresql+psycopg2":
        raise StoreError(
            f"{source} {mask_secrets(raw)}: driver '{url.drivername}' is not supported (use postgresql://)"
        )
    if not url.database:
        raise StoreError(f"{source} {mask_secrets(raw)}: name the database, e.g. postgresql://USER@HOST:5432/mlsysopt")
    if not url.host and "host" not in url.query:
        raise StoreError(f"{source} {mask_secrets(raw)}: name the server, e.g. postgresql://USER@127.0.0.1:5432/DB")
    return StorageSpec(url.render_as_string(hide_password=False), "postgresql", None, source)


def resolve_storage(explicit: str | None, run_path: str | Path | None = None) -> StorageSpec:
    """The store of a run: ``explicit`` (``--storage``), else ``MLSYSOPT_STORAGE``, else ``mlsysopt.db`` beside it.

    Without ``run_path`` the default is ``./mlsysopt.db`` (what ``mlsysopt runs`` reads when nothing is given).

    Args:
        explicit: The ``--storage`` value, or None when not given.
        run_path: The run folder; the default store is ``mlsysopt.db`` in its parent.

    Returns:
        The spec; ``source`` says which of the three it came from.

    Raises:
        StoreError: If ``explicit`` or ``MLSYSOPT_STORAGE`` is malformed.
    """
    if explicit is not None:
        return parse_storage(explicit, "--storage")
    env = os.environ.get(ENV, "").strip()
    if env:
        return parse_storage(env, ENV)
    if run_path is None:
        return _sqlite(Path.cwd() / DEFAULT_FILE, "default")
    spec = _sqlite(Path(os.path.abspath(run_path)).parent / DEFAULT_FILE, "default")
    return StorageSpec(spec.url, spec.kind, spec.path, spec.source, spec.timeout, str(run_path))


# ---------------------------------------------------------------------------- file system checks (SQLite)
def fs_type(path: Path) -> str:
    """The file system type (``ext4``, ``nfs4``, ...) of the mount holding ``path`` ('' when unknown)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    target, best, kind = str(path), "", ""
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if len(fields) < 5 or not after:
            continue
        mount = fields[4].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, after[0]
    return kind


def existing_ancestor(path: Path) -> Path:
    """The nearest folder of ``path`` (itself included) that exists."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_sqlite_path(spec: StorageSpec, must_have_parent: bool) -> bool:
    """Refuse a SQLite store that cannot be used safely; returns whether the file exists already.

    Refused: a folder or a non-SQLite file at the path, a missing parent folder (when ``must_have_parent``: a path
    the user typed, not the default beside a run folder that is about to be made), a parent that is not writable,
    and a network file system (SQLite's locks are not reliable there, so concurrent writers could corrupt it).
    """
    path = spec.path
    assert path is not None
    where = spec.where()
    if path.is_dir():
        raise StoreError(f"{where}: {path} is a folder; give a file, e.g. {path / DEFAULT_FILE}")
    if must_have_parent and not path.parent.is_dir():
        raise StoreError(f"{where}: the folder {path.parent} does not exist")
    folder = existing_ancestor(path.parent)
    kind = fs_type(folder)
    if kind in NETWORK_FS or kind.startswith("nfs"):
        raise StoreError(
            f"{where}: {folder} is on a network file system ({kind}), where SQLite's locking is unsafe for "
            "concurrent writers; put the file on a local disk or use PostgreSQL (--storage postgresql://USER@HOST/DB)"
        )
    if path.exists():
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(SQLITE_MAGIC))
        except OSError as exc:
            raise StoreError(f"{where}: cannot read {path} ({exc.strerror or exc})") from None
        if head and head != SQLITE_MAGIC:
            raise StoreError(f"{where}: {path} is not a SQLite database (choose another file)")
        if not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK):
            raise StoreError(f"{where}: {path} is not writable (SQLite also needs to write beside it)")
        return bool(head)
    if not os.access(folder, os.W_OK):
        raise StoreError(f"{where}: cannot create {path}: {_why_not_writable(folder)}")
    return False


def _why_not_writable(folder: Path) -> str:
    """Why ``folder`` cannot be written: a read-only file system, or its permissions."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return f"Read-only file system at {folder} (choose another --out, or --storage elsewhere)"
    except OSError:
        pass
    return f"Permission denied: {folder} is not writable (choose another --out, or --storage elsewhere)"
