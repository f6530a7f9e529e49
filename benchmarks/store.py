"""Study-store benchmark: trials written per second to SQLite and to PostgreSQL by 1 and 8 writers, trials lost,
and what the store costs a NAS table search.

* **Throughput.** ``W`` writer processes (8 spawned once and reused by every configuration; each connected, with
  Optuna imported and its tables reflected, before the clock starts: a process's start-up is not a trial's cost)
  write ``N`` trials each into one study, each trial its own transaction (as Optuna's ``create_new_trial``
  commits one trial), and again in batches of 50 (what a run's background writer does with a queue). SQLite is
  the default file store (WAL, ``synchronous=NORMAL``); PostgreSQL is a real server started here (Debian's
  package, durable: fsync on).
  Trials/s = every writer's trials / (last writer's end - the start signal). Afterwards every study is read back
  through Optuna's API: ``lost_trials`` counts trials missing or doubled (must be 0).
* **Overhead.** ``nas search`` on NAS-Bench-Graph's real Cora table (EPNAS, the default method), the library's
  ``prepare_search(...).run()`` with the store on (SQLite beside the run folder: study, every evaluation, the
  checkpoint copies) and off (``--storage none``), interleaved, over seeds; ``overhead_fraction`` = mean extra wall
  time / mean time without the store, with a 95% interval over seeds. Random search (only table look-ups, ~0.5 ms
  an evaluation) is measured too, as the worst case. On a loaded machine these differences of whole searches are
  noisier than the store's cost, so ``overhead_fraction_replay`` also measures the store's CPU alone: a finished
  search's evaluations replayed through a run folder with the store on and off (:func:`store_cost`), divided by
  the search's CPU per evaluation.
* **Contention.** 8 ``mlsysopt placement compare`` processes (HEFT on a 12-task graph, ``--seeds 200`` each: 200
  trials a run) started at once against one SQLite store with ``?timeout=0.001``, so nearly every write meets
  another's lock and is retried. ``lost_trials_contention`` = trials of the runs that finished ``done`` missing
  from (or doubled in) the store; ``status_mismatches`` = runs whose folder (``log.txt``'s last line) and
  ``runs list`` disagree on the status; ``stopped_runs`` = runs that stopped with one ``error:`` line naming the
  store (the alternative the issue allows to losing nothing).

    python benchmarks/store.py [--quick] --out FILE.json
* **Reading a large study.** ``runs export`` (JSON and CSV, to a file) and ``runs show`` of one study of
  ``--trials`` trials (default 100,000, each with a ~1 KB record), each its own process: wall time and peak RSS
  (``export_*``). They stream the trials a page at a time, so the RSS should not grow with the study.

    python benchmarks/store.py --only contention --out FILE.json   # adds the contention figures to FILE.json
    python benchmarks/store.py --only export [--trials N] --out FILE.json   # adds the large-study figures
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mlsysopt.io import write_json_atomic
from mlsysopt.store import StudyHandle, TrialRecord, parse_storage, storage
from mlsysopt.store.database import Store
from mlsysopt.store.run import RunStore
from mlsysopt.store.writer import machine_id


def _trials(writer: int, n: int) -> list[TrialRecord]:
    rec = {"arch": {"choices": [1, 2, 3, 4, 5], "blocks": 4}, "perf": 0.8, "resources": {"params": 1e6}}
    return [
        TrialRecord(
            {"choice_0": i % 9, "choice_1": writer, "blocks": 4},
            [0.5 + (i % 97) / 1000],
            key=f"{writer}:{i}",
            record={**rec, "index": i},
            attrs={"test_perf": 0.7, "feasible": True},
        )
        for i in range(n)
    ]


def _writer(inbox: Any, out: Any) -> None:
    """A writer process kept for every configuration (spawned once: a spawn costs seconds on a loaded machine).

    Per round: a task ``(handle, writer, n, batch)`` -> connect and build the trials, report ready; ``"go"`` ->
    write them, report the end time. ``None`` stops it.
    """
    import optuna.distributions  # noqa: F401  (what a write imports: a process's start-up, not a trial's cost)

    while (task := inbox.get()) is not None:
        handle, writer, n, batch = task
        try:
            _ = Store.connect(handle.spec).tables  # connected, Optuna's tables reflected before the clock starts
            trials = _trials(writer, n)
            out.put(("ready", writer, 0.0))
            if inbox.get() != "go":
                raise RuntimeError("writer out of step")
            for lo in range(0, n, batch):
                handle.write(trials[lo : lo + batch])
            out.put(("done", writer, time.time()))
        except Exception as exc:  # the parent stops with it rather than waiting for a result that never comes
            out.put(("error", writer, f"{type(exc).__name__}: {exc}"))


class WriterPool:
    """``size`` spawned writer processes that every throughput configuration reuses."""

    def __init__(self, size: int) -> None:
        ctx = mp.get_context("spawn")
        self.out = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(size)]
        self.procs = [ctx.Process(target=_writer, args=(q, self.out), daemon=True) for q in self.inboxes]
        for proc in self.procs:
            proc.start()

    def run(self, handle: StudyHandle, writers: int, per_writer: int, batch: int) -> float:
        """Seconds from the start signal until the last of ``writers`` writers has written its trials."""
        for w in range(writers):
            self.inboxes[w].put((handle, w, per_writer, batch))
        for _ in range(writers):
            self._get("ready")
        t0 = time.time()
        for w in range(writers):
            self.inboxes[w].put("go")
        return max(self._get("done") for _ in range(writers)) - t0

    def _get(self, what: str) -> float:
        kind, writer, at = self.out.get(timeout=900)
        if kind != what:
            raise SystemExit(f"error: writer {writer}: {at}" if kind == "error" else f"error: {kind} before {what}")
        return float(at)

    def close(self) -> None:
        """Stop the writers."""
        for q in self.inboxes:
            q.put(None)
        for proc in self.procs:
            proc.join(timeout=60)


def throughput(url: str, pool: WriterPool, writers: int, per_writer: int, batch: int) -> dict[str, Any]:
    """Trials/s of ``writers`` processes writing ``per_writer`` trials each in batches of ``batch``."""
    spec = parse_storage(url)
    store = Store.open(spec)
    sid, name = store.create_study(f"bench-{writers}w-{batch}b", "maximize", {"mlsysopt.command": "benchmark"})
    handle = StudyHandle(spec, sid, name, machine_id())
    seconds = pool.run(handle, writers, per_writer, batch)
    expected = writers * per_writer
    trials = store.trials(sid)
    keys = [t.user_attrs.get("key") for t in trials]
    numbers = sorted(t.number for t in trials)
    lost = (expected - len(set(keys))) + (len(keys) - len(set(keys))) + (numbers != list(range(len(numbers))))
    return {"writers": writers, "trials": expected, "batch": batch, "seconds": seconds,
            "trials_per_s": expected / seconds, "stored": len(trials), "lost": int(lost)}  # fmt: skip


def nas_overhead(method: str, budget: int, seeds: list[int], root: Path) -> dict[str, Any]:
    """Wall and CPU seconds of a NAS table search with and without the store (pairs interleaved), over ``seeds``.

    CPU time (this process, every thread: the store's writer thread included) is the load-robust figure on a
    shared machine; wall time is the user's, and on a busy machine mostly other people's noise.
    """
    from mlsysopt.nas.experiment import SearchOptions, prepare_search

    def once(seed: int, url: str, tag: str, n: int = budget) -> tuple[float, float]:
        out = root / f"{method}-{tag}-{seed}"
        options = SearchOptions(space="nasbench-graph:cora", method=method, budget=n, seed=seed)
        with storage(url):
            t0, c0 = time.perf_counter(), time.process_time()
            prepare_search(out, options).run()
            return time.perf_counter() - t0, time.process_time() - c0

    once(seeds[0], "none", "warm", 2)  # the table, torch and the store's libraries loaded once before timing
    once(seeds[0], str(root / "warm.db"), "warm-store", 2)
    on: list[tuple[float, float]] = []
    off: list[tuple[float, float]] = []
    for k, seed in enumerate(seeds):
        order = [("none", off), (str(root / f"{method}.db"), on)]
        for url, sink in order if k % 2 == 0 else order[::-1]:
            sink.append(once(seed, url, "on" if sink is on else "off"))

    def fraction(i: int) -> tuple[float, list[float]]:
        base = statistics.fmean(b[i] for b in off)
        frac = [(a[i] - b[i]) / base for a, b in zip(on, off, strict=True)]
        mean = statistics.fmean(frac)
        half = _t95(len(frac)) * statistics.stdev(frac) / len(frac) ** 0.5 if len(frac) > 1 else float("nan")
        return mean, [mean - half, mean + half]

    wall, wall_ci = fraction(0)
    cpu, cpu_ci = fraction(1)
    extra = statistics.fmean(a[0] - b[0] for a, b in zip(on, off, strict=True))
    extra_cpu = statistics.fmean(a[1] - b[1] for a, b in zip(on, off, strict=True))
    return {"method": method, "budget": budget, "seeds": seeds,
            "wall_s_with_store": [a[0] for a in on], "wall_s_without": [b[0] for b in off],
            "cpu_s_with_store": [a[1] for a in on], "cpu_s_without": [b[1] for b in off],
            "overhead_fraction": wall, "overhead_fraction_ci95": wall_ci,
            "overhead_fraction_cpu": cpu, "overhead_fraction_cpu_ci95": cpu_ci,
            "overhead_ms_per_trial": 1000 * extra / budget,
            "overhead_cpu_ms_per_trial": 1000 * extra_cpu / budget}  # fmt: skip


def store_cost(source: Path, root: Path, reps: int) -> dict[str, Any]:
    """CPU seconds the store costs a finished search, replayed without the search: its run folder opened, every
    evaluation of its ``result.json`` recorded (what the search's job does per trial), its checkpoint saved every 25
    evaluations and copied into the store each time (a search copies it at most every 5 s), result.json written
    and the run closed; store on vs ``--storage none``, interleaved, ``reps`` times. Only the store's own work
    differs, so this figure does not drown in the search's noise on a loaded machine."""
    from mlsysopt.io import RunDir, read_json
    from mlsysopt.store.records import nas_trial, record

    result = read_json(source / "result.json")
    state = (source / "checkpoint.pt").read_bytes()
    settings = read_json(source / "settings.json")

    def once(url: str, tag: str) -> float:
        with storage(url):
            c0 = time.process_time()
            with RunDir(root / f"replay-{tag}", settings, checkpoint="checkpoint.pt", sink=RunStore).check() as run:
                for i, rec in enumerate(result["evaluations"]):
                    record(nas_trial(rec), "maximize")
                    if i % 25 == 24:
                        run.checkpoint.write_bytes(state)
                        if url != "none":
                            run.store.mirror_checkpoint(run.checkpoint, force=True)
                run.write_json("result.json", result)
            return time.process_time() - c0

    once("none", "warm-0")
    once(str(root / "replay-warm.db"), "warm-1")
    on, off = [], []
    for k in range(reps):
        order = [("none", off), (str(root / "replay.db"), on)]
        for url, sink in order if k % 2 == 0 else order[::-1]:
            sink.append(once(url, f"{len(on) + len(off)}"))
    n = len(result["evaluations"])
    per = [1000 * (a - b) / n for a, b in zip(on, off, strict=True)]
    half = _t95(len(per)) * statistics.stdev(per) / len(per) ** 0.5
    mean = statistics.fmean(per)
    return {"evaluations": n, "reps": reps, "cpu_s_with_store": on, "cpu_s_without": off,
            "cpu_ms_per_trial": mean, "cpu_ms_per_trial_ci95": [mean - half, mean + half]}  # fmt: skip


def contention(root: Path, writers: int = 8, seeds: int = 200, timeout: float = 0.001) -> dict[str, Any]:
    """``writers`` CLI runs at once on one SQLite store with a ``timeout`` s lock wait: trials lost, statuses that
    disagree between run folder and store, runs stopped (each with one error line naming the store)."""
    from mlsysopt.store.query import list_runs

    exe = str(Path(sys.executable).parent / "mlsysopt")
    env = {**os.environ, "MLSYSOPT_STORAGE": "", "COLUMNS": "200"}
    env.pop("MLSYSOPT_STORE_ERRORS", None)
    root.mkdir(parents=True, exist_ok=True)
    gen = [exe, "graph", "generate", "--out", "g.npz", "--tasks", "12", "--types", "2", "--cluster-out", "c.json",
           "--devices", "3", "--seed", "1"]  # fmt: skip
    subprocess.run(gen, cwd=root, env=env, check=True, capture_output=True)
    url = f"sqlite:///{root / 'contention.db'}?timeout={timeout:g}"
    t0 = time.perf_counter()
    procs = {
        f"r{w}": subprocess.Popen([exe, "placement", "compare", "g.npz", "--cluster", "c.json", "--methods", "heft",
                                   "--seeds", str(seeds), "--out", f"r{w}", "--storage", url],
                                  cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for w in range(writers)
    }  # fmt: skip
    outcome = {}
    for name, proc in procs.items():
        _, err = proc.communicate(timeout=900)
        outcome[name] = (proc.returncode, [ln for ln in err.splitlines() if ln.startswith("error:")])
    seconds = time.perf_counter() - t0
    runs = {r.name: r for r in list_runs(Store.open(parse_storage(url)))}
    lost = mismatches = stopped = 0
    details = []
    for name, (code, errors) in outcome.items():
        log = root / name / "log.txt"
        folder = log.read_text().strip().splitlines()[-1].removeprefix("=== ").split(" ")[0].rstrip(",") if (
            log.is_file()) else "removed"  # fmt: skip
        store = runs[name].status if name in runs else "absent"
        stored = runs[name].trials if name in runs else 0
        if code == 0:
            lost += abs(seeds - stored) + (runs[name].complete != stored if name in runs else 0)
        else:
            stopped += len(errors) == 1 and "--storage" in errors[0]
        mismatches += folder != store and not (folder == "removed" and store == "absent")
        details.append({"run": name, "exit": code, "folder_status": folder, "store_status": store,
                        "stored_trials": stored, "error": errors[0] if errors else None})  # fmt: skip
    return {"writers": writers, "trials_per_run": seeds, "sqlite_timeout_s": timeout, "wall_s": seconds,
            "lost_trials_contention": int(lost), "status_mismatches": int(mismatches), "stopped_runs": int(stopped),
            "runs": details}  # fmt: skip


def _t95(n: int) -> float:
    """Two-sided 95% Student t quantile for n samples (n - 1 degrees of freedom)."""
    from scipy import stats

    return float(stats.t.ppf(0.975, n - 1))


def main() -> None:
    """Run the benchmark and write its JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Small sizes (about a minute on a quiet machine).")
    ap.add_argument("--out", type=Path, default=Path("runs/bench/store.json"))
    ap.add_argument("--only", choices=["contention", "export"], help="Only this case, added to the JSON at --out.")
    ap.add_argument("--trials", type=int, default=100_000, help="Trials of the study --only export reads.")
    args = ap.parse_args()
    if args.only == "export":
        _export_only(args.out, args.trials)
        return
    if args.only == "contention":
        _contention_only(args.out)
        return
    quick = args.quick
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still stops the server and the writers
    per_writer = {1: 50 if quick else 1000, 8: 10 if quick else 250}
    from mlsysopt.store.local_postgres import LocalPostgres

    started = time.perf_counter()
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    result: dict[str, Any] = {"benchmark": "store", "quick": quick, "date": dt.date.today().isoformat(),
                              "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
                              "trials_per_s": {}, "batched_trials_per_s": {}, "runs": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="mlsysopt-bench-contention-") as tmp:
        _add_contention(result, contention(Path(tmp)))
    pool = WriterPool(8)  # spawned while the server starts
    with tempfile.TemporaryDirectory(prefix="mlsysopt-bench-store-") as tmp, LocalPostgres(durable=True) as pg:
        root = Path(tmp)
        urls = {"sqlite": f"sqlite:///{root / 'bench.db'}", "postgres": pg.url}
        for kind, url in urls.items():
            result["trials_per_s"][kind], result["batched_trials_per_s"][kind] = {}, {}
            for writers in (1, 8):
                for batch, key in ((1, "trials_per_s"), (50, "batched_trials_per_s")):
                    r = throughput(url, pool, writers, per_writer[writers], batch)
                    result["runs"].append({"store": kind, **r})
                    result[key][kind][str(writers)] = r["trials_per_s"]
                    print(f"{kind:8s} {writers} writer(s), batch {batch:2d}: {r['trials_per_s']:8.1f} trials/s, "
                          f"lost {r['lost']}", flush=True)  # fmt: skip
        pool.close()
        result["lost_trials"] = sum(r["lost"] for r in result["runs"])
        seeds = [0, 1] if quick else list(range(8))
        budget = 10 if quick else 100
        epnas = nas_overhead("epnas", budget, seeds, root)
        replay = store_cost(root / "epnas-on-0", root, 4 if quick else 10)
        search_cpu_ms = 1000 * statistics.fmean(epnas["cpu_s_without"]) / budget
        epnas["replay"] = replay
        epnas["search_cpu_ms_per_trial"] = search_cpu_ms
        result["overhead_fraction_replay"] = replay["cpu_ms_per_trial"] / search_cpu_ms
        result["overhead_fraction_replay_ci95"] = [x / search_cpu_ms for x in replay["cpu_ms_per_trial_ci95"]]
        result["overhead_fraction"] = epnas["overhead_fraction"]
        result["overhead_fraction_cpu"] = epnas["overhead_fraction_cpu"]
        result["overhead"] = {"epnas": epnas}
        if not quick:
            result["overhead"]["random"] = nas_overhead("random", 200, seeds[:4], root)
        print(f"NAS table search (epnas, {budget} evaluations): store overhead {epnas['overhead_fraction']:+.1%} wall, "
              f"{epnas['overhead_fraction_cpu']:+.1%} CPU ({epnas['overhead_cpu_ms_per_trial']:.2f} CPU ms per trial)",
              flush=True)  # fmt: skip
        print(f"  replayed without the search: the store costs {replay['cpu_ms_per_trial']:.2f} CPU ms per trial "
              f"= {result['overhead_fraction_replay']:+.2%} of the search's {search_cpu_ms:.1f} CPU ms per trial",
              flush=True)  # fmt: skip
    result["targets"] = {"lost_trials": "must be 0", "overhead_fraction": "<= 0.05",
                         "lost_trials_contention": "0, or the runs that lost trials stopped (stopped_runs)",
                         "status_mismatches": "must be 0"}  # fmt: skip
    result["wall_s"] = time.perf_counter() - started
    result["load_average"] = {"before": load_before, "after": Path("/proc/loadavg").read_text().split()[:3]}
    write_json_atomic(args.out, result)
    print(f"wrote {args.out} ({result['wall_s']:.0f} s)")


def _add_contention(result: dict[str, Any], c: dict[str, Any]) -> None:
    result["lost_trials_contention"] = c["lost_trials_contention"]
    result["status_mismatches"] = c["status_mismatches"]
    result["contention"] = c
    print(f"contention ({c['writers']} writers, SQLite timeout {c['sqlite_timeout_s']:g} s): lost "
          f"{c['lost_trials_contention']} trial(s), {c['status_mismatches']} status mismatch(es), "
          f"{c['stopped_runs']} run(s) stopped with one line ({c['wall_s']:.0f} s)", flush=True)  # fmt: skip


def _contention_only(out: Path) -> None:
    """The contention case alone, its figures added to (or replacing those in) the JSON at ``out``."""
    from mlsysopt.io import read_json

    result = read_json(out) if out.is_file() else {"benchmark": "store"}
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    with tempfile.TemporaryDirectory(prefix="mlsysopt-bench-contention-") as tmp:
        c = contention(Path(tmp))
    c["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="minutes")
    c["load_average"] = {"before": load_before, "after": Path("/proc/loadavg").read_text().split()[:3]}
    _add_contention(result, c)
    result.setdefault("targets", {}).update({"lost_trials_contention": "0, or the runs that lost trials stopped "
                                             "(stopped_runs)", "status_mismatches": "must be 0"})  # fmt: skip
    write_json_atomic(out, result)
    print(f"wrote {out}")


def large_study(root: Path, trials: int) -> dict[str, Any]:
    """Wall time and peak RSS of ``runs export`` (json, csv) and ``runs show`` of one study of ``trials`` trials."""
    from mlsysopt.store import Store, TrialRecord, parse_storage

    db = root / "big.db"
    store = Store.open(parse_storage(str(db)))
    sid, _ = store.create_study("big", "minimize", {"mlsysopt.command": "bench", "mlsysopt.status": "done"})
    t0 = time.perf_counter()
    for start in range(0, trials, 2_000):
        store.write_trials(sid, [TrialRecord({"i": i, "lr": 0.001 * (i % 7 + 1)}, [float((i * 7919) % trials)],
                                             key=str(i), record={"i": i, "pad": "x" * 1_000},
                                             attrs={"acc": i / trials})
                                 for i in range(start, min(trials, start + 2_000))], {})  # fmt: skip
    out: dict[str, Any] = {"trials": trials, "write_s": time.perf_counter() - t0}
    exe = str(Path(sys.executable).with_name("mlsysopt"))
    for name, argv in (("export_json", ["runs", "export", "big", "--format", "json", "--out", str(root / "o.json")]),
                       ("export_csv", ["runs", "export", "big", "--format", "csv", "--out", str(root / "o.csv")]),
                       ("show", ["runs", "show", "big"])):  # fmt: skip
        t = time.perf_counter()
        proc = subprocess.Popen([exe, *argv, "--storage", str(db)], stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out[name] = {"wall_s": time.perf_counter() - t, "peak_rss_mb": usage.ru_maxrss / 1024, "rc": proc.returncode}
        print(f"{name}: {out[name]['wall_s']:.1f} s, peak RSS {out[name]['peak_rss_mb']:.0f} MB", flush=True)
    return out


def _export_only(out: Path, trials: int) -> None:
    """The large-study case alone, its figures added to the JSON at ``out`` (key ``large_study``)."""
    from mlsysopt.io import read_json

    result = read_json(out) if out.is_file() else {"benchmark": "store"}
    with tempfile.TemporaryDirectory(prefix="mlsysopt-bench-export-") as tmp:
        r = large_study(Path(tmp), trials)
    r["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="minutes")
    r["machine"] = f"{os.cpu_count()} CPUs, {platform.platform()}"
    result["large_study"] = r
    write_json_atomic(out, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
