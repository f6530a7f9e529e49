"""The NAS-feasibility part of ``latency_oracle.py`` again, alone, with the host's speed read before and after (the
reference workload ``collect-latency`` times each round): the same 60 digits CNNs, the shipped oracle.

Run: ``python benchmarks/latency_oracle_nas_recheck.py --out FILE.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency_oracle import nas_measure, nas_precision
from mlsysopt.costmodel.oracle.oracle import LatencyOracle
from mlsysopt.costmodel.oracle.timing import reference_ms
from mlsysopt.io import write_json_atomic


def main() -> None:
    """Time the reference, the 60 CNNs, the reference again; write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", type=int, default=60)
    args = ap.parse_args()
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    ref_before = reference_ms()
    nas = nas_precision(LatencyOracle.load(), nas_measure(args.models, 0))
    ref_after = reference_ms()
    out = {"nas": nas, "reference_ms_before_after": [ref_before, ref_after], "seconds": time.perf_counter() - t0,
           "load_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
           "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "units": {"reference_ms": "ms"}}  # fmt: skip
    write_json_atomic(args.out, out)
    print(
        {k: nas[k] for k in ("precision", "recall", "precision_point", "recall_point", "limit_ms")},
        out["reference_ms_before_after"],
        out["load_before_after"],
        round(out["seconds"], 1),
    )


if __name__ == "__main__":
    main()
