"""Figures of the guides drawn from the benchmark JSON files (the numbers are never copied by hand).

The docs hook (``docs/hooks.py``) adds them to the site as ``figures/NAME.png`` when it is built; run this file to
write them into a folder: ``python docs/gen_figures.py OUT_DIR [BENCHMARK_DIR]``.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the benchmark result files (JSON) the figures are read from
BENCH = HERE.parent / "benchmarks" / "results"


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def nas_regret(bench: Path, plt) -> bytes:
    """Mean validation regret against the budget, one line per method (issue #34, held-out tables)."""
    data = json.loads((bench / "nas34.json").read_text())
    budgets = sorted(data["val_regret"], key=int)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for method in data["val_regret"][budgets[0]]:
        values = [data["val_regret"][b][method] for b in budgets]
        bold = method in ("epnas", "epnas_cold", "bananas", *data["default_method"].values())
        ax.plot(
            [int(b) for b in budgets],
            values,
            marker="o",
            lw=2.2 if bold else 1.0,
            alpha=1 if bold else 0.55,
            label=method,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([int(b) for b in budgets], budgets)
    ax.set_xlabel("budget (evaluations)")
    ax.set_ylabel("mean validation regret (lower is better)")
    ax.set_title(
        f"NAS-Bench-Graph, {len(data['settings']['datasets'])} held-out tables, {data['settings']['seeds']} seeds"
    )
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, which="both")
    return _png(fig)


def serving_heldout(bench: Path, plt) -> bytes:
    """Measurements to within 5% of the optimum per tuner: median (bar) and mean with its 95% CI."""
    data = json.loads((bench / "serving_heldout.json").read_text())
    tuners = data["heldout"]
    names = list(tuners)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    xs = range(len(names))
    ax.bar(xs, [tuners[n]["median"] for n in names], color="tab:blue", alpha=0.7, label="median")
    means = [tuners[n]["mean"] for n in names]
    errors = [
        [m - tuners[n]["mean_ci95"][0] for n, m in zip(names, means, strict=True)],
        [tuners[n]["mean_ci95"][1] - m for n, m in zip(names, means, strict=True)],
    ]
    ax.errorbar(xs, means, yerr=errors, fmt="o", color="black", capsize=3, label="mean, 95% CI")
    ax.set_xticks(list(xs), names, rotation=30, ha="right")
    ax.set_ylabel(f"measurements to within 5%\n(a miss counts {data['heldout_study']['cap'] + 1})")
    ax.set_title(
        f"serving: {len(data['heldout_study']['split'])} held-out presets (simulated), "
        f"{data['heldout_study']['seeds']} seeds"
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _png(fig)


def oracle_predicted_vs_measured(bench: Path, plt) -> bytes:
    """The latency oracle's predicted latency against the time measured here, on the benchmark's digits CNNs."""
    data = json.loads((bench / "latency_oracle.json").read_text())["nas"]
    measured, predicted, high = data["measured_ms"], data["predicted_ms"], data["predicted_high_ms"]
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    ax.errorbar(
        measured,
        predicted,
        yerr=[[0] * len(predicted), [h - p for h, p in zip(high, predicted, strict=True)]],
        fmt="o",
        ms=4,
        alpha=0.7,
        elinewidth=0.6,
        label="predicted (point, upper 90% end)",
    )
    lo, hi = min(measured + predicted), max(measured + high)
    ax.plot([lo, hi], [lo, hi], color="gray", lw=1, label="predicted = measured")
    ax.plot([lo, hi], [lo * 1.1, hi * 1.1], color="gray", lw=0.6, ls="--", label="±10%")
    ax.plot([lo, hi], [lo * 0.9, hi * 0.9], color="gray", lw=0.6, ls="--")
    ax.set_xlabel("measured here (ms)")
    ax.set_ylabel("predicted by the oracle (ms)")
    ax.set_title(f"latency oracle: {data['candidates']} digits CNNs (real)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)


FIGURES: dict[str, Callable] = {
    "nas_regret.png": nas_regret,
    "serving_heldout.png": serving_heldout,
    "oracle_predicted_vs_measured.png": oracle_predicted_vs_measured,
}


def render(bench: Path = BENCH) -> dict[str, bytes]:
    """Every figure as PNG bytes, by file name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    for name, draw in FIGURES.items():
        out[name] = draw(Path(bench), plt)
        plt.close("all")
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    for name, png in render(Path(sys.argv[2]) if len(sys.argv) > 2 else BENCH).items():
        (target / name).write_bytes(png)
        print(target / name)
