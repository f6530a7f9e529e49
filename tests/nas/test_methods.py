"""The method contract: every NAS method in METHOD_NAMES on a tiny fake space (also home of the fake space)."""

from __future__ import annotations

import itertools
import math
import os
from typing import Any

import numpy as np
import pytest

from mlsysopt.errors import MlsysoptError
from mlsysopt.nas import METHOD_NAMES, Arch, Constraint, Constraints, Evaluation, SearchSpace, method_class, run_search


class FakeSpace(SearchSpace):
    """A head decision and two per-block decisions, 3 options each, 1..2 blocks; additive synthetic performance.

    Higher options score better but cost more params, so the constrained optimum differs from the unconstrained one.
    """

    name = "fake"
    min_blocks = 1
    max_blocks = 2
    resource_names = ("params", "flops", "latency_ms", "intensity")
    head_options = (3,)
    head_names = ("head",)
    block_options = (3, 3)
    block_names = ("b{i}.op", "b{i}.width")

    def __init__(self, seed: int = 0, fail: set[Arch] | None = None, nan: set[Arch] | None = None, flaky: int = 0):
        rng = np.random.default_rng(seed)
        n = len(self.decisions(self.max_blocks))
        self.values = np.sort(rng.uniform(0, 1, (n, 3)), axis=1)  # option 2 is the best of every decision
        self.fail, self.nan = fail or set(), nan or set()
        self.flaky = flaky  # the first `flaky` evaluations raise (only meaningful in-process)
        self.exit_on: set[Arch] = set()  # evaluating these kills the (worker) process
        self.calls = 0

    def decode(self, arch: Arch) -> dict[str, Any]:
        return dict(zip(self.decision_names(arch.blocks), arch.choices, strict=True))

    def resources(self, arch: Arch) -> dict[str, float]:
        params = 1.0 + sum(arch.choices)
        return {"params": params, "flops": 10 * params, "latency_ms": arch.blocks + 0.1 * params, "intensity": params}

    def true_perf(self, arch: Arch) -> float:
        return float(sum(self.values[i, c] for i, c in enumerate(arch.choices))) / len(self.values)

    def evaluate(self, arch: Arch, seed: int = 0) -> Evaluation:
        self.check(arch)
        self.calls += 1
        if arch in self.exit_on:
            os._exit(3)
        if arch in self.fail or self.calls <= self.flaky:
            raise RuntimeError(f"boom {arch.choices}")
        perf = math.nan if arch in self.nan else self.true_perf(arch)
        return Evaluation(arch, perf, perf - 0.01, self.resources(arch), cost_s=0.0)

    def all_archs(self) -> list[Arch]:
        return [
            Arch(c, b)
            for b in range(self.min_blocks, self.max_blocks + 1)
            for c in itertools.product(*(range(k) for k in self.decisions(b)))
        ]

    def default_prior(self) -> Any:
        """A transfer prior from a *related* fake task's history records (another seed's performances)."""
        return fake_prior()


_PRIOR: list[Any] = []


def fake_records(seed: int = 7) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every architecture of FakeSpace(seed) as history records (result.json "evaluations" entries) + settings."""
    other = FakeSpace(seed)
    records = [{"index": i, "decoded": other.decode(a), "perf": other.true_perf(a), "ok": True}
               for i, a in enumerate(other.all_archs())]  # fmt: skip
    return records, {"space": f"fake-{seed}"}


def fake_prior() -> Any:
    """The prior from :func:`fake_records`, trained once per test process."""
    if not _PRIOR:
        from mlsysopt.nas import PriorConfig, prior_from_records

        _PRIOR.append(prior_from_records([fake_records()], PriorConfig(hidden=16, epochs=30)))
    return _PRIOR[0]


class CostlySpace(FakeSpace):
    """FakeSpace whose latency is a costly resource: counts how often it is fetched (and cheap look-ups)."""

    costly_resources = ("latency_ms",)

    def __init__(self) -> None:
        super().__init__()
        self.cheap = self.timed = 0

    def resources_for(self, arch: Arch, names: Any) -> dict[str, float]:
        res = self.resources(arch)
        if "latency_ms" in names:
            self.timed += 1
        else:
            self.cheap += 1
            del res["latency_ms"]
        return res


class DepthFakeSpace(FakeSpace):
    """:class:`FakeSpace` whose block count is a choice (as a user's ``Blocks(min=1, max=2)``): a 1-block
    architecture is a network of its own, which the methods that do not grow stage by stage must also draw."""

    depth_is_a_choice = True


def constraints(mode: str = "hard") -> Constraints:
    """params <= 5 and latency <= 2.4: 74 of the 270 fake architectures are feasible."""
    return Constraints([Constraint("max_params", 5), Constraint("max_latency_ms", 2.4)], mode=mode)


def best_feasible(space: FakeSpace, cons: Constraints) -> float:
    return max(space.true_perf(a) for a in space.all_archs() if cons.feasible(space.resources(a)))


@pytest.mark.parametrize("space_cls", [FakeSpace, DepthFakeSpace])
@pytest.mark.parametrize("method", sorted(METHOD_NAMES))
def test_method_contract(method: str, space_cls: type[FakeSpace]) -> None:
    space, cons = space_cls(), constraints()
    budget = 24
    runs = []
    for _ in range(2):
        searcher = method_class(method)(space, cons, budget=budget, seed=3)
        asked: list[Arch] = []
        real_ask = searcher.ask

        def ask(n: int, real_ask: Any = real_ask, asked: list[Arch] = asked) -> list[Arch]:
            out = real_ask(n)
            assert len(out) <= n
            asked.extend(out)
            return out

        searcher.ask = ask  # type: ignore[method-assign]
        result = run_search(searcher, workers=3)
        assert 0 < len(result.history) <= budget
        for a in asked:
            space.check(a)
            assert cons.feasible(space.resources(a)), f"{method} proposed an infeasible {a}"
        assert len(set(asked)) == len(asked), f"{method} proposed an architecture twice"
        assert result.best is not None and cons.feasible(result.best.resources)
        assert result.best.perf == max(ev.perf for ev in result.history)
        runs.append([ev.arch for ev in result.history])
        if space.depth_is_a_choice:
            assert {a.blocks for a in asked} == {1, 2}, f"{method} never proposed one of the block counts"
    assert runs[0] == runs[1], f"{method} is not deterministic for a fixed seed"
    if method_class(method).anytime:  # the benchmark reads smaller budgets off one run: that must be exact
        short = run_search(method_class(method)(space, cons, budget=10, seed=3), workers=3)
        assert [ev.arch for ev in short.history] == runs[0][:10], f"{method} reads its budget: not anytime"


def test_methods_beat_nothing_and_find_good_archs() -> None:
    """With 30 evaluations (of 74 feasible architectures) every method that searches gets close to the constrained
    optimum (zero-shot transfer does not search: it is only as good as the other task's ranking)."""
    space, cons = FakeSpace(), constraints()
    target = best_feasible(space, cons)
    fake_prior()  # trained once (the space's own prior, as a table's would be), not part of any search's time
    for method in sorted(set(METHOD_NAMES) - {"zero_shot"}):  # (speed is benchmarks/nas.py's: wall_s per method)
        result = run_search(method_class(method)(space, cons, budget=30, seed=0), workers=2)
        assert result.best is not None
        assert target - result.best.perf < 0.1, f"{method}: {result.best.perf:.3f} vs optimum {target:.3f}"


@pytest.mark.parametrize("method", sorted(METHOD_NAMES))
def test_tiny_budgets_and_bad_budgets(method: str) -> None:
    """Budgets of 1 and 2 with more workers than evaluations: every method spends at most its budget, returns a
    feasible best; a budget < 1 (or not an integer) is one clear error."""
    space, cons = FakeSpace(), constraints()
    for budget in (1, 2):
        result = run_search(method_class(method)(space, cons, budget=budget, seed=0), workers=4)
        assert 1 <= len(result.history) <= budget, f"{method} at budget {budget}: {len(result.history)} evaluations"
        assert result.best is not None and cons.feasible(result.best.resources)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(MlsysoptError, match="budget must be an integer >= 1"):
            method_class(method)(space, cons, budget=bad, seed=0)
