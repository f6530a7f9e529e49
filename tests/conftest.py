"""Fixtures shared by every test package."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

# The `mlsysopt` command re-runs itself once with PYTHONHASHSEED=0 when the environment lacks it
# (src/mlsysopt/hashseed.py); the commands the tests start get it here and skip that step (tests/test_hashseed.py
# checks the step itself).
os.environ.setdefault("PYTHONHASHSEED", "0")


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Tiny tensors: torch's intra-op threads only add contention on a busy 2-core box (100x slower seen)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _idle_fraction(seconds: float = 1.0) -> float:
    """The share of this machine's CPU time that was idle over the next ``seconds`` (from /proc/stat)."""
    import time

    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, all

    idle0, all0 = read()
    time.sleep(seconds)
    idle1, all1 = read()
    return (idle1 - idle0) / max(all1 - all0, 1)


@pytest.fixture(autouse=True)
def _a_quiet_machine_for_quiet_tests(request: pytest.FixtureRequest) -> None:
    """A ``quiet`` test compares the timings of two runs, so it starts on an idle machine: right after an install or
    another test run the kernel can still be reclaiming memory and the last processes exiting for some seconds. Waits
    until 90% of the CPU time is idle over a second (at most 60 s), then the test measures as it would alone."""
    if request.node.get_closest_marker("quiet") is None or not Path("/proc/stat").is_file():
        return
    for _ in range(60):
        if _idle_fraction() >= 0.9:
            return


@pytest.fixture
def small_costmodel_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's costmodel section at smaller sizes (about a minute at its own): the same steps, plots and figures
    of each kind, for the tests that check what the section writes rather than how good its model is."""
    from mlsysopt.demo import costmodel, costmodel_oracle

    monkeypatch.setattr(costmodel, "MEM_NODES", (200, 1_000))
    monkeypatch.setattr(costmodel, "SUBSET", {"train": 8, "valid": 4, "test": 4})
    monkeypatch.setattr(costmodel, "EPOCHS", 1)
    monkeypatch.setattr(costmodel, "FINETUNE_EPOCHS", 1)
    monkeypatch.setattr(costmodel_oracle, "ROUNDS", 1)


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


# ---------------------------------------------------------------------------- README run times (tests/test_readme.py)
_README_TIMES = Path(
    os.environ.get("MLSYSOPT_README_TIMES", Path(__file__).resolve().parents[1] / "runs" / "readme-times.txt")
)


#: Thread pools of one thread in every process of the session (xdist workers, the commands, pool and Ray workers they
#: start): two workers already keep both cores busy, and an OpenMP/BLAS pool of 2 threads per process only spins
#: against the other worker (13x the CPU for the same tiny torch op seen on this box). Code that runs a number of
#: threads on purpose (ONNX Runtime sessions, the timed torch settings of the latency collection, LightGBM's
#: ``num_threads``) sets it itself and is unaffected; a value already in the environment is kept.
ONE_THREAD = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def pytest_configure(config: pytest.Config) -> None:
    """One folder where this session's processes (xdist workers, the commands they start) share the NAS transfer
    priors they fit (``MLSYSOPT_PRIOR_CACHE``): the first fits one, the others read it (~15 s each otherwise). And
    one-thread pools in every process of the session (:data:`ONE_THREAD`)."""
    import tempfile

    for name in ONE_THREAD:
        os.environ.setdefault(name, "1")

    if not hasattr(config, "workerinput") and "MLSYSOPT_PRIOR_CACHE" not in os.environ:
        os.environ["MLSYSOPT_PRIOR_CACHE"] = tempfile.mkdtemp(prefix="mlsysopt-test-priors-")
        config._mlsysopt_prior_cache = os.environ["MLSYSOPT_PRIOR_CACHE"]  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    folder = getattr(config, "_mlsysopt_prior_cache", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    """A fresh table of README run times per session (the controller clears it; xdist workers append)."""
    if not hasattr(session.config, "workerinput"):
        _README_TIMES.unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the wall time of every README command test_readme.py ran (``*``: with its small budgets)."""
    import json

    if not _README_TIMES.is_file():
        return
    rows = [json.loads(line) for line in _README_TIMES.read_text().splitlines() if line.strip()]
    if not rows:
        return
    terminalreporter.section("README and docs run times (s; * = with the small budgets of tests/test_readme.py)")
    for r in rows:
        terminalreporter.write_line(f"{r['s']:7.1f}{'*' if r['sub'] else ' '}  [{r['section']}] {r['command'][:150]}")
    terminalreporter.write_line(f"{sum(r['s'] for r in rows):7.1f}   total")


# ---------------------------------------------------------------------------- longest tests first
# pytest-xdist hands tests to its workers in collection order, so a long test collected last runs alone at the end
# while the other worker idles. tests/durations.json (seconds per test id of >= 1 s, from `make test-durations`)
# puts the longest modules first; a test missing from it keeps its place after the known ones of its module.
_DURATIONS = Path(__file__).with_name("durations.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations", action="store_true", help="write tests/durations.json from this run's call times"
    )


#: What a test module must mention for its tests to carry each marker ``make test`` selects its sessions by. A session
#: whose ``-m`` expression no test without these markers passes (the quiet run, the Ray group's session) imports only
#: the modules that could hold its tests: importing every module (torch, Ray, ...) just to deselect its tests cost
#: ~10 s of the quiet run and ~5 s of the Ray group's. :func:`pytest_itemcollected` checks the rule on every test any
#: session collects, so a marker given another way fails the run instead of leaving its test out of every session.
SESSION_MARKERS = {"quiet": b"mark.quiet", "ray": b'"ray"', "pages": b"mark.pages", "realtime": b"mark.realtime"}
_EXPRESSION_WORDS = re.compile(r"[()]|\w+")
_MODULE_TEXT: dict[Path, bytes] = {}


def _module_text(path: Path) -> bytes:
    if path not in _MODULE_TEXT:
        try:
            _MODULE_TEXT[path] = path.read_bytes()
        except OSError:
            _MODULE_TEXT[path] = b""
    return _MODULE_TEXT[path]


def _may_select(expression: str, possible: list[str]) -> bool:
    """Whether ``-m expression`` can select a test whose markers (of :data:`SESSION_MARKERS`) are among ``possible``;
    True for an expression of other words (it is not evaluated here)."""
    words = _EXPRESSION_WORDS.findall(expression)
    allowed = {*SESSION_MARKERS, "and", "or", "not", "(", ")"}
    if "".join(words) != re.sub(r"\s+", "", expression) or not set(words) <= allowed:
        return True
    for subset in itertools.product((False, True), repeat=len(possible)):
        present = dict.fromkeys(SESSION_MARKERS, False) | dict(zip(possible, subset, strict=True))
        if eval(expression, {"__builtins__": {}}, present):  # marker names, and/or/not, parentheses: checked above
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip importing a test module whose tests the session's ``-m`` expression cannot select (see
    :data:`SESSION_MARKERS`)."""
    expression = (config.option.markexpr or "").strip()
    if not expression or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    text = _module_text(collection_path)
    possible = [marker for marker, needle in SESSION_MARKERS.items() if needle in text]
    return None if _may_select(expression, possible) else True


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark every test of the Ray ``xdist_group`` ``ray`` too, so ``-m ray`` / ``-m "not ray"`` select the group:
    ``make test`` runs it in a session of its own beside the CPU-bound tests (see the Makefile)."""
    if any(m.args[:1] == ("ray",) or m.kwargs.get("name") == "ray" for m in item.iter_markers("xdist_group")):
        item.add_marker(pytest.mark.ray)
    text = _module_text(Path(item.path))
    for marker, needle in SESSION_MARKERS.items():
        if item.get_closest_marker(marker) is not None and needle not in text:
            raise pytest.UsageError(
                f"{item.nodeid} is marked {marker!r} but its module does not mention {needle.decode()}: the session "
                f"that runs {marker!r} tests would not import it (tests/conftest.py, SESSION_MARKERS)"
            )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _sort_longest_first(items)
    _mark_xdist_groups(config, items)


def _mark_xdist_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test of an ``xdist_group`` the ``@group`` suffix ``--dist loadgroup`` schedules by.

    pytest-xdist 3.8 sets ``item._nodeid``, which pytest 9 no longer reads (its ids are ``item._id``): every
    group was spread over both workers (each started its own Ray cluster, Ray Serve and PostgreSQL, and module
    fixtures twice). Same rule as xdist's (the group names joined, sorted); a suffix already there is kept."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if item.nodeid.rfind("@") > item.nodeid.rfind("]"):
            continue
        names = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")
        }
        if names:
            _set_nodeid(item, f"{item.nodeid}@{'_'.join(sorted(names))}")


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    try:  # pytest 9 keeps a structured id (`Node._id`); older ones a string (`Node._nodeid`, which xdist sets)
        from _pytest.nodeid import coerce_node_id
    except ImportError:
        item._nodeid = nodeid
    else:
        item._id = coerce_node_id(nodeid)


def _nodeid(nodeid: str) -> str:
    """A test's id without the ``@group`` suffix of :func:`_mark_xdist_groups`."""
    return nodeid[: nodeid.rfind("@")] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


def _sort_longest_first(items: list[pytest.Item]) -> None:
    try:
        known = json.loads(_DURATIONS.read_text())
    except (OSError, ValueError):
        return
    # whole modules, longest first; a module's tests stay together and in their own order (its module-scoped
    # fixtures are built once per worker; tests sharing a session resource keep the order they were written in)
    total: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        total[module] = total.get(module, 0.0) + float(known.get(item.nodeid, 0.0))
    items.sort(key=lambda item: -total[item.nodeid.split("::")[0]])  # stable


_seen: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    nodeid = _nodeid(report.nodeid)
    _seen[nodeid] = _seen.get(nodeid, 0.0) + report.duration  # with xdist: every worker's, here too


def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.getoption("--store-durations") and not hasattr(session.config, "workerinput"):
        slow = {k: round(v, 1) for k, v in sorted(_seen.items(), key=lambda kv: -kv[1]) if v >= 1.0}
        _DURATIONS.write_text(json.dumps(slow, indent=0) + "\n")
