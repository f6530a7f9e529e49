"""The placement section of ``mlsysopt demo``: a tiny GiPH training, GiPH (shipped policy) vs the baselines, adaptation.

Registered in :data:`mlsysopt.demo.BUILDERS` as ``"mlsysopt.demo.placement:demo_section"``. Runs in well under a
minute: the policy's training pipeline runs on a few tiny problems only (a demo, not the shipped policy's training).
The headline names the method with the shortest makespan at the equal budget, GiPH or not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mlsysopt.errors import MlsysoptError
from mlsysopt.graph.generate import cluster_for
from mlsysopt.graph.importers.wfcommons import from_recipe
from mlsysopt.graph.problem import PlacementProblem
from mlsysopt.placement.base import default_budget
from mlsysopt.placement.experiment import METHODS, run_method
from mlsysopt.report.html import Section
from mlsysopt.report.search import plot_search
from mlsysopt.report.summary import cluster_summary, graph_summary
from mlsysopt.runtime.threads import torch_threads

if TYPE_CHECKING:
    from mlsysopt.demo import DemoContext
    from mlsysopt.placement.base import PlacementResult
    from mlsysopt.placement.giph import GiPH

#: The tiny demo training: both stages of the shipped policy's pipeline on a few small layered DAGs.
DEMO_TRAINING = {
    "imitation_problems": 3,
    "teacher_steps": 3,
    "imitation_epochs": 2,
    "updates": 2,
    "episodes_per_update": 2,
    "search_budget_per_task": 2,
    "distribution": "layered",
}
#: The methods compared: the practitioner's baselines, saga's best, the plain hill climb, GiPH and the paper's GiPH.
DEMO_METHODS = ["heft", "fastest_device", "saga_best", "annealing", "eft_greedy", "local_search", "giph", "giph_paper"]
LABELS = {m: METHODS[m].label for m in DEMO_METHODS}
#: The columns of the device-model table (one row per zoo model).
DEVICE_COLUMNS = ["model", "measured (us)", "op profile (us)", "op profile x measured", "one speed x measured"]
#: The methods run again under ``ordered`` execution (HEFT and saga's schedulers as their own schedules).
ORDERED_METHODS = ["heft", "saga_best", "local_search", "giph"]


def demo_section(ctx: DemoContext) -> list[Section]:
    """Run a tiny training, compare the shipped policy with the baselines on Montage, then adapt to losing devices."""

    with torch_threads(1):  # small per-step graphs: intra-op threads cost more than they give
        return _build(ctx)


def _build(ctx: DemoContext) -> list[Section]:
    # deferred: imports pandas, psutil, pyarrow, torch, torch_geometric
    from mlsysopt.placement.giph import GiPH

    # deferred: imports pandas, psutil, pyarrow, torch, torch_geometric
    from mlsysopt.placement.training import SYNTHETIC, TrainConfig, train

    ctx.step("placement: tiny demo training of the GiPH policy")
    cfg = TrainConfig(**DEMO_TRAINING, seed=ctx.seed)
    trained = train(cfg)
    try:  # the shipped policy (trained by the benchmark); the tiny demo training shows the pipeline
        giph, policy_note = GiPH.load("pretrained"), "the shipped pretrained policy (benchmark training)"
    except MlsysoptError:
        giph, policy_note = GiPH(trained.policy), "the tiny demo-trained policy (the shipped one did not load)"

    ctx.step("placement: generating a WfCommons Montage workflow")
    graph = from_recipe("montage", 62, seed=ctx.seed)  # a size WfChef builds exactly (60 gives 58)
    cluster = cluster_for(graph, 8, ctx.seed)
    problem = PlacementProblem(graph, cluster)
    budget = default_budget(graph)
    bound = problem.cp_min
    runs: dict[str, PlacementResult] = {}
    for method in DEMO_METHODS:
        ctx.step(f"placement: {LABELS[method]} ({budget} evaluations)")
        runs[method] = run_method(method, problem, budget, ctx.seed, giph)

    ordered = problem.with_execution("ordered")
    ordered_runs: dict[str, PlacementResult] = {}
    for method in ORDERED_METHODS:
        ctx.step(f"placement: {LABELS[method]}, ordered execution ({budget} evaluations)")
        ordered_runs[method] = run_method(method, ordered, budget, ctx.seed, giph)

    heft_ms = runs["heft"].makespan
    rows = [
        [f"{LABELS[m]} (fifo)", r.makespan, r.makespan / heft_ms, r.makespan / bound, r.steps_to_best, r.evaluations]
        for m, r in runs.items()
    ]
    own = ordered_runs["heft"].makespan
    rows += [
        [f"{LABELS[m]} (ordered)", r.makespan, r.makespan / own, r.makespan / bound, r.steps_to_best, r.evaluations]
        for m, r in ordered_runs.items()
    ]
    best = min(runs, key=lambda m: runs[m].makespan)
    images, captions = _compare_plots(ctx, problem, runs, best, budget)
    history = [h for h in trained.history if h.get("stage") == "reinforce"]
    res: dict[str, Any] = {
        "training": {
            "data": SYNTHETIC,
            "note": "tiny demo training (imitation, then REINFORCE), not the shipped policy's",
            "policy_used": policy_note,
            "config": {k: v for k, v in vars(cfg).items() if k in DEMO_TRAINING or k == "seed"},
            "history": history,
        },
        "graph": graph_summary(graph),
        "cluster": cluster_summary(cluster),
        "budget": budget,
        "cp_min": bound,
        "best": best,
        "methods": {m: r.to_dict(graph, cluster) for m, r in runs.items()},
        "placements": {LABELS[m]: {"makespan": r.makespan, "slr": r.makespan / bound} for m, r in runs.items()},
        "ordered": {
            "heft_reference": "HEFT's own schedule (its map and insertion order)",
            "makespans": {m: r.makespan for m, r in ordered_runs.items()},
            "ratio_to_heft": {m: r.makespan / own for m, r in ordered_runs.items()},
        },
    }
    ctx.results["placement"] = res
    imp = f"{history[-1]['improvement']:.1%}" if history else "n/a"
    text = (
        f"{_headline(runs, best)} Under ordered execution (a static schedule; x HEFT there is against HEFT's "
        f"own schedule) the default (local search) is {ordered_runs['local_search'].makespan / own:.3f} x HEFT, "
        f"GiPH {ordered_runs['giph'].makespan / own:.3f} x HEFT and the best saga schedule "
        f"{ordered_runs['saga_best'].makespan / own:.3f} x HEFT.\n\n"
        f"Every method searched a placement of a WfCommons Montage workflow ({graph.num_nodes} tasks, fitted to "
        f"real traces) on {cluster.num_devices} heterogeneous devices (synthetic) with the same budget of {budget} "
        "simulator evaluations (10 x tasks); HEFT and the fastest device are constructive and use one, saga_best "
        "one per saga scheduler. 'local search' (the default of 'placement place') starts from the best of a "
        "portfolio (HEFT, the fastest device, CPOP, the best saga scheduler) and draws the moves of a local search "
        "uniformly; GiPH is the same search with its policy proposing the moves (it needs fewer evaluations but "
        "more seconds, so it is not the default); 'GiPH (paper)' is the paper's search from a "
        "random placement. 'fifo' rows: each device runs ready tasks in arrival order, and x HEFT is against "
        "HEFT's map run that way; 'ordered' rows: each device follows a static schedule (HEFT's and saga's own), "
        "and x HEFT is against HEFT's own schedule.\n\n"
        f"The policy's training pipeline (imitation of a steepest-descent teacher on {cfg.imitation_problems} tiny "
        f"synthetic layered DAGs, then {cfg.updates} REINFORCE updates on the search; last improvement {imp}) ran "
        f"here only to show it; the searches use {policy_note}."
    )
    compare = Section(
        heading="Placement: GiPH vs baselines (WfCommons Montage)",
        text=text,
        table=rows,
        columns=["method", "makespan (s)", "x HEFT", "SLR", "steps to best", "evaluations"],
        images=images,
        captions=captions,
        anchor="placement",
    )
    return [compare, _adaptation(ctx, problem, runs[best].placement, budget, giph, res), _device_model(ctx, res)]


def _headline(runs: dict[str, PlacementResult], best: str) -> str:
    """The honest headline: who won at the equal budget, GiPH's ratio to HEFT and to the winner."""
    heft = runs["heft"].makespan
    giph = runs["giph"].makespan
    tied = [m for m, r in runs.items() if r.makespan <= runs[best].makespan * (1 + 1e-9)]
    who = " and ".join(LABELS[m] for m in tied)
    if "giph" in tied:
        verb = "tie for" if len(tied) > 1 else "has"
        return f"At equal evaluations, {who} {verb} the shortest makespan: GiPH is {giph / heft:.3f} x HEFT."
    return (
        f"At equal evaluations, {who} had the shortest makespan ({runs[best].makespan / heft:.3f} x HEFT); GiPH "
        f"did not win here ({giph / heft:.3f} x HEFT, {giph / runs[best].makespan:.3f} x {LABELS[best]})."
    )


def _compare_plots(
    ctx: DemoContext, problem: PlacementProblem, runs: dict[str, PlacementResult], best: str, budget: int
) -> tuple[list[str], list[str]]:
    from mlsysopt.report.gantt import plot_gantt  # deferred: looked up at call time, tests replace plot_gantt

    ctx.step("placement: plotting search curves and the best placement")
    curves = {LABELS[m]: r.history for m, r in runs.items()}
    plot_search(curves, ctx.out / "placement_search.png", title=f"Montage: best makespan vs evaluations ({budget})")
    sched = problem.simulate(runs[best].placement)
    plot_gantt(
        problem.graph, problem.cluster, sched, ctx.out / "placement_best_gantt.png", title=f"best: {LABELS[best]}"
    )
    return (
        ["placement_search.png", "placement_best_gantt.png"],
        [
            "Best makespan found after each simulator evaluation (HEFT: one evaluation, dashed).",
            f"Gantt chart of the best placement ({LABELS[best]}, makespan {sched.makespan:.4g} s).",
        ],
    )


def _adaptation(
    ctx: DemoContext, problem: PlacementProblem, start: np.ndarray, budget: int, giph: GiPH, res: dict[str, Any]
) -> Section:
    # deferred: imports pandas, psutil, pyarrow, torch, torch_geometric
    from mlsysopt.placement.adaptation import adapt, removable_devices

    graph, cluster = problem.graph, problem.cluster
    removed = removable_devices(graph, cluster, start, 2)
    new = cluster
    for name in removed:
        new = new.remove_device(name)
    ctx.step(f"placement: removing {', '.join(removed)} and adapting")
    result = adapt(graph, cluster, new, start, giph, budget, ctx.seed)
    labels = {"giph_adapt": "GiPH adapt", "heft_rerun": "HEFT re-run", "keep": "keep (no search)"}
    makespans = {labels[k]: ms for k, ms in result.makespans.items()}
    plot_search(
        {
            "GiPH adapt": result.giph.history,
            "HEFT re-run": [result.heft.makespan],
            "keep (no search)": [result.keep_makespan],
        },
        ctx.out / "placement_adapt.png",
        title=f"after removing {', '.join(removed)}: best makespan vs evaluations",
    )
    before, orphans = result.before_makespan, result.orphans
    res["adaptation"] = {
        "removed": removed,
        "orphaned_tasks": len(orphans),
        "makespan_before": before,
        "makespans": makespans,
        "giph_steps_to_best": result.giph.steps_to_best,
    }
    text = (
        f"The deployed (best) placement loses its two busiest devices, {' and '.join(removed)}: "
        f"{len(orphans)} of {graph.num_nodes} tasks are orphaned. 'keep' parks each orphan on its fastest "
        "feasible remaining device and changes nothing else (one evaluation); HEFT re-plans from scratch; "
        f"GiPH.adapt reuses the same policy without retraining, moves the orphans first and then searches "
        f"freely ({budget} evaluations). Makespan before the change: {before:.4g} s."
    )
    rows = [[label, ms, ms / before] for label, ms in makespans.items()]
    return Section(
        heading="Placement: adapting to device removal",
        text=text,
        table=rows,
        columns=["re-placement", "makespan (s)", "x before"],
        images=["placement_adapt.png"],
        captions=["GiPH's search after the change, against HEFT's re-run and the kept placement (dashed)."],
        anchor="placement-adapt",
    )


def _device_model(ctx: DemoContext, res: dict[str, Any]) -> Section:
    """This CPU's op profile (``placement calibrate``) against one speed per device, on three zoo models."""
    # deferred: imports torch
    from mlsysopt import zoo
    from mlsysopt.graph.calibrate import calibrate, median_seconds
    from mlsysopt.graph.cluster import DeviceCluster
    from mlsysopt.graph.importers.torch_fx import from_module
    from mlsysopt.graph.op_profile import on_one_device
    from mlsysopt.graph.presets import CPU_OP_OVERHEAD

    ctx.step("placement: timing micro-kernels for this CPU's op profile")
    profile = calibrate(threads=1, reps=100, seed=ctx.seed)
    speed = 1.0 / profile.coefficients["linear.per_flop"]  # one speed: this CPU's GEMM rate from the same kernels
    cluster = DeviceCluster([speed], [True], [[np.inf]], [[0.0]], ["cpu0"], "dnn", {"source": "calibrated"},
                            [CPU_OP_OVERHEAD])  # fmt: skip
    rows, out = [], {}
    for name in ("cnn", "mobilenet", "transformer"):
        ctx.step(f"placement: {name} measured and simulated on this CPU")
        module, inputs = zoo.get(name)
        measured = median_seconds(lambda m=module, i=inputs: m(*i), 100)
        profiled, flops_only = on_one_device(from_module(module, inputs, name=name), cluster, profile)
        out[name] = {"measured_s": measured, "op_profile_s": profiled, "one_speed_s": flops_only}
        rows.append([name, measured * 1e6, profiled * 1e6, profiled / measured, flops_only / measured])
    fit = profile.meta["fit"]
    res["device_model"] = {"models": out, "profile_fit": fit, "one_speed_flop_per_s": speed}
    text = (
        f"'placement calibrate' timed {len(profile.meta['kernels'])} PyTorch micro-kernels on this CPU (one thread) "
        "and fitted one linear model per op group: a fixed cost, a FLOP rate and a byte rate (its kernels: fitted / "
        f"measured {fit['min_ratio']:.2f}-{fit['max_ratio']:.2f}). Each zoo model then ran on this CPU (median of "
        "100 calls, measured) and was simulated all on one device: with the op profile, and with one speed (this "
        f"CPU's GEMM rate, {speed / 1e9:.0f} GFLOP/s) plus the presets' per-op overhead "
        f"({CPU_OP_OVERHEAD * 1e6:.0f} us). Give the profile to --op-costs of placement place, compare and graph "
        "simulate."
    )
    heading = "Placement: a device model measured on this CPU"
    return Section(heading, text, rows, DEVICE_COLUMNS, anchor="placement-device-model")
