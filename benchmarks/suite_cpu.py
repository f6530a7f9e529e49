"""The CPU each test of `make test` costs this machine, its own processes and everything it starts (issue #30).

`make test` is bound by CPU on the 2-core machine: the sessions run side by side and keep both cores busy, so its
wall time is about the machine-wide CPU the tests cost, divided by 2. A test's own wall time in a parallel run says
little (it includes waiting for the other session), and ``/usr/bin/time`` misses what is not its child at the end
(Ray's daemons and workers). This script runs each session of ``make test`` **serially, one test at a time**, and
charges each test with the machine's busy CPU time while it ran (``/proc/stat``: user, nice, system, interrupts; so
the Ray workers, raylets, servers, browsers and command processes a test starts count, and the machine must be
otherwise idle). A test that pays a first import or a session fixture carries it, as its session would.

Output: ``--out`` JSON with each session's machine CPU (s), wall (s) and test count, its ``--top`` most expensive
tests, the CPU per test file, and the host's speed (``reference_ms`` of the latency collection before and after)
and load. It takes about 30 min on the 2-core machine (the sessions' CPU, on one core at a time). Run from the
repository root, alone:

    python benchmarks/suite_cpu.py --out benchmarks/results/suite_cpu.json

The same file is the pytest plugin it loads into each session (``-p benchmarks.suite_cpu``; ``SUITE_CPU_OUT`` names
the JSON-lines file it appends one record per test to).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT_ENV = "SUITE_CPU_OUT"


def busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- the plugin (inside each session)
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
    """Charge the test with the machine's busy CPU while its setup, call and teardown ran."""
    out = os.environ.get(OUT_ENV)
    busy, t0 = busy_seconds(), time.time()
    yield
    if out:
        record = {"test": item.nodeid, "cpu_s": busy_seconds() - busy, "wall_s": time.time() - t0}
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")


# ---------------------------------------------------------------------------- the script
def sessions() -> dict[str, str]:
    """The ``-m`` expression of each session of ``make test``, read from the Makefile (its ``FIRST``)."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(r"^FIRST := (.+)$", text, flags=re.M)
    if match is None:
        raise SystemExit("Makefile: no `FIRST := ...` line (the Ray group's marker expression)")
    first = match.group(1).strip()
    return {"ray group": first, "the rest": f"not ({first}) and not quiet", "quiet": "quiet"}


def host() -> dict[str, Any]:
    """The host's speed (the latency collection's reference workload, ms), its load and ``uptime`` now."""
    from mlsysopt.costmodel.oracle.timing import reference_ms

    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {"reference_ms": round(reference_ms(), 4), "load_1min": os.getloadavg()[0], "uptime": uptime}


def run_session(name: str, expression: str, top: int) -> dict[str, Any]:
    """One session of ``make test`` run serially with the plugin; its figures."""
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as tmp:
        records = Path(tmp) / "tests.jsonl"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as `make test` does
        env |= {"PYTHONHASHSEED": "0", "MLSYSOPT_PRIOR_CACHE": str(Path(tmp) / "priors"), OUT_ENV: str(records)}
        (Path(tmp) / "priors").mkdir()
        busy, t0 = busy_seconds(), time.time()
        plugins = ["-p", "benchmarks.suite_cpu", "-p", "no:cacheprovider"]
        cmd = [sys.executable, "-m", "pytest", "-q", *plugins, "-m", expression]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        cpu, wall = busy_seconds() - busy, time.time() - t0
        tail = proc.stdout.strip().splitlines()[-1:] or [""]
        rows = [json.loads(line) for line in records.read_text().splitlines()] if records.exists() else []
    print(f"{name}: {cpu:.0f} CPU-s in {wall:.0f} s, {len(rows)} tests ({tail[0]})", flush=True)
    by_file: collections.Counter[str] = collections.Counter()
    for r in rows:
        by_file[r["test"].split("::")[0]] += r["cpu_s"]
    ranked = sorted(rows, key=lambda r: -r["cpu_s"])
    total = sum(r["cpu_s"] for r in rows)
    return {
        "expression": expression,
        "exit_code": proc.returncode,
        "summary": tail[0],
        "cpu_s": round(cpu, 1),
        "wall_s": round(wall, 1),
        "tests": len(rows),
        "tests_cpu_s": round(total, 1),
        "top_share": {
            str(n): round(sum(r["cpu_s"] for r in ranked[:n]) / max(1e-9, total), 3) for n in (10, 50, 100, 200)
        },
        "top": [
            {"test": r["test"], "cpu_s": round(r["cpu_s"], 2), "wall_s": round(r["wall_s"], 2)} for r in ranked[:top]
        ],
        "by_file_cpu_s": {k: round(v, 1) for k, v in by_file.most_common()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--top", type=int, default=100, help="most expensive tests listed per session")
    ap.add_argument("--only", default="", help="comma-separated session names (default: all three)")
    args = ap.parse_args()
    known = sessions()
    only = [name.strip() for name in args.only.split(",") if name.strip()] or list(known)
    unknown = [name for name in only if name not in known]
    if unknown:
        ap.error(f"--only {','.join(unknown)}: expected session names among {', '.join(known)}")
    chosen = {k: v for k, v in known.items() if k in only}
    before = host()
    start = dt.datetime.now(dt.UTC)
    result = {name: run_session(name, expr, args.top) for name, expr in chosen.items()}
    after = host()
    doc = {
        "what": "machine-wide busy CPU per test of `make test`, each session run serially (benchmarks/suite_cpu.py)",
        "units": {"cpu_s": "CPU seconds of the whole machine", "wall_s": "seconds", "reference_ms": "ms"},
        "started_utc": start.isoformat(timespec="seconds"),
        "ended_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host_before": before,
        "host_after": after,
        "total_cpu_s": round(sum(s["cpu_s"] for s in result.values()), 1),
        "sessions": result,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"total {doc['total_cpu_s']:.0f} CPU-s; wrote {args.out}")


if __name__ == "__main__":
    main()
