"""The sizes and the task of a ``serving tune``: phases scaled to the budget, the task's quick profile.

* :func:`phase_sizes` — how many candidates the confirmation re-measures, in how many rounds, and how many windows
  the noise check takes, for a search of a given budget (a small budget answers in minutes);
* :func:`probe_profile` — the task's service profile on a measured engine (what a prior is bound to);
* :func:`top_predicted` — what a prior predicted best, for the report.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.serving.inputs import DEFAULT_PROFILE, machine_threads, resolve_profile
from mlsysopt.serving.profiling import calibrate_dispatch, measure_profile

if TYPE_CHECKING:
    from mlsysopt.serving.model import ServedModel
    from mlsysopt.serving.prior import TaskPrior
    from mlsysopt.serving.profile import ServiceProfile
    from mlsysopt.serving.tuning import TuneResult

#: bounds of the confirmation and noise phases (each measurement is one or more windows of real serving)
MAX_CONFIRM_TOP, MAX_CONFIRM_ROUNDS, MAX_NOISE_WINDOWS = 100, 1_000, 1_000


def phase_sizes(
    budget: int, confirm_top: int | None = None, confirm_rounds: int | None = None, noise_windows: int | None = None
) -> tuple[int, int, int]:
    """Confirmation candidates, rounds and noise windows for a search of ``budget`` measurements per rate.

    A given value is checked and kept; a missing one scales with the budget, so that a small budget gets an answer
    in minutes: ``confirm_top`` = ceil(budget / 4) up to 3 (budget 3: the pick against the default), ``confirm_rounds``
    = 3 (the noise may add rounds, up to the budget), ``noise_windows`` = the budget, from 2 to 5.

    Args:
        budget: Search measurements per rate, >= 1.
        confirm_top: Candidates confirmed (None: scaled).
        confirm_rounds: Interleaved rounds (None: 3).
        noise_windows: Windows of the noise phase (None: scaled).

    Returns:
        tuple[int, int, int]: ``(confirm_top, confirm_rounds, noise_windows)``.

    Raises:
        MlsysoptError: If a given value is out of range.
    """
    top = min(3, math.ceil(budget / 4)) if confirm_top is None else confirm_top
    rounds = 3 if confirm_rounds is None else confirm_rounds
    noise = min(5, max(2, budget)) if noise_windows is None else noise_windows
    for name, value, low, high in (
        ("--confirm-top", top, 1, MAX_CONFIRM_TOP),
        ("--confirm-rounds", rounds, 1, MAX_CONFIRM_ROUNDS),
        ("--noise-windows", noise, 2, MAX_NOISE_WINDOWS),
    ):
        if not low <= value <= high:
            raise MlsysoptError(f"{name} {value} must be {low} to {high:,}")
    return int(top), int(rounds), int(noise)


def top_predicted(prior: TaskPrior, job: Any, result: TuneResult, k: int = 5) -> list[dict[str, Any]]:
    """The prior's top ``k`` configurations at the first rate of ``job`` (a tuning job), as it predicted them."""
    w = job.workloads[0]
    scores = prior.scores(job.space, w, job.objective)
    return [
        {**c.to_dict(), "predicted": job.objective.describe(float(scores[job.space.index(c)]))}
        for c in prior.ranked(job.space, w, job.objective, k)
    ]


def probe_profile(model: ServedModel, cores: int, seed: int = 0) -> ServiceProfile:
    """A quick service profile of a served model: batches of 1, 4 and 16 rows with 1 and 2 intra-op threads
    (3 runs each), the dispatch overhead from a low-rate run, and the model's facts (FLOPs, parameters, input)."""
    intra = (1, 2) if cores >= 2 else (1,)
    prof, _ = measure_profile(model, (1, 4, 16), intra, (1,), repeats=3, cores=cores, name=model.path.name)
    prof, _ = calibrate_dispatch(model, prof, seed=seed, requests=40)
    return replace(prof, **model.facts())


def machine_cores(engine: str, profile: str | None) -> int:

    if engine == "sim":
        return resolve_profile(DEFAULT_PROFILE if profile is None else profile).cores
    return machine_threads()
