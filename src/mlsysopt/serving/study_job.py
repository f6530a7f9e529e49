"""The job behind ``mlsysopt serving study`` on the simulated engine: validated first, then written into a run folder.

The study itself (exhaustive tables, every tuner x seed) is :func:`mlsysopt.serving.study.run_study`; a study on a
measured engine is :class:`mlsysopt.serving.measured_study.MeasuredStudyJob`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlsysopt.errors import MlsysoptError
from mlsysopt.io import RunDir, to_jsonable
from mlsysopt.runtime import make_executor
from mlsysopt.serving.inputs import DEFAULT_MAX_BATCH, DEFAULT_PROFILE, MAX_SECONDS, resolve_prior, resolve_profile
from mlsysopt.serving.limits import check_rate, check_requests
from mlsysopt.serving.space import Space, Workload
from mlsysopt.serving.study import WARM_LABELS, default_rates, run_study, tuner_name
from mlsysopt.serving.tuners import TUNERS
from mlsysopt.store.run import RunStore


class StudyJob:
    """``mlsysopt serving study``: validated first, then the study written into a run folder.

    Args:
        out: Run folder to write.
        tuners: Tuner labels to compare (``_warm`` ones need ``prior``).
        seeds: Number of seeds per tuner.
        profile: Service profile spec (None: ``synthetic:32``).
        rates: Two rates A,B in req/s (None: from the profile).
        cap_fraction: Measurements per run as a fraction of the space size.
        requests: Requests per simulated window.
        workers: Parallel workers of the executor.
        backend: Executor backend, ``"local"`` or ``"ray"``.
        address: Ray cluster address (None: a private local instance).
        seed: First seed.
        prior: Prior spec for the warm-started tuners (None: none).

    Raises:
        MlsysoptError: For unknown tuners, warm tuners without a prior, bad rates or request counts, or a busy run
            folder.
    """

    def __init__(
        self,
        out: Path,
        tuners: Sequence[str],
        seeds: int = 10,
        profile: str | None = None,
        rates: Sequence[float] | None = None,
        cap_fraction: float = 0.2,
        requests: int = 400,
        workers: int = 1,
        backend: str = "local",
        address: str | None = None,
        seed: int = 0,
        prior: str | None = None,
    ) -> None:

        RunDir(out, checkpoint=None, sink=RunStore).check()
        unknown = [t for t in tuners if tuner_name(t)[0] not in TUNERS or (tuner_name(t)[1] and t not in WARM_LABELS)]
        if unknown or not tuners:
            raise MlsysoptError(
                f"--tuners: unknown tuner(s) {unknown or '(none)'} (choose from: {', '.join(TUNERS)}; warm-started "
                f"from --prior: {', '.join(WARM_LABELS)})"
            )
        warm = [t for t in tuners if tuner_name(t)[1]]
        if warm and prior is None:
            raise MlsysoptError(f"--tuners {','.join(warm)}: warm-started tuners need --prior")
        check_requests(requests)
        if rates is not None and (len(rates) != 2 or not all(Workload(r) for r in rates)):
            raise MlsysoptError(f"--rate {rates}: give two rates A,B (tune at A, then re-tune at B)")
        if rates is not None:
            for r in rates:  # the floor of every serving command (a window must see some requests)
                check_rate(float(r), MAX_SECONDS)
        self.profile = resolve_profile(DEFAULT_PROFILE if profile is None else profile)
        self.space = Space.for_machine(self.profile.cores, DEFAULT_MAX_BATCH["sim"])
        self.tuners, self.seeds = list(tuners), list(range(seed, seed + seeds))
        self.rates = tuple(rates) if rates is not None else default_rates(self.profile)
        self.cap = max(1, math.ceil(cap_fraction * self.space.size))
        self.requests, self.workers, self.backend, self.address = requests, workers, backend, address
        self.prior = None
        if prior is not None:
            self.prior = resolve_prior(prior)
        settings = {
            "tuners": self.tuners, "seeds": seeds, "seed": seed, "profile": profile, "rates": list(self.rates),
            "cap": self.cap, "requests": requests, "backend": backend, "workers": workers, "prior": prior,
        }  # fmt: skip
        self.run_dir = RunDir(out, settings, checkpoint=None, sink=RunStore).check()

    def describe(self) -> str:
        """What the study runs, in one line."""
        return (
            f"{len(self.tuners)} tuners x {len(self.seeds)} seeds on {self.space.size:,} simulated configurations "
            f"({self.backend}, {self.workers} workers)"
        )

    def run(self) -> dict[str, Any]:
        """Run the study on the chosen executor; write result.json and study.png."""
        # deferred: imports PIL, matplotlib
        from mlsysopt.serving.figures import plot_study

        with self.run_dir as run, make_executor(self.backend, self.workers, self.address) as ex:
            result = run_study(
                self.profile,
                self.space,
                self.tuners,
                self.seeds,
                ex,
                self.rates,
                self.cap,
                n_requests=self.requests,
                prior=self.prior,
            )
            plot_study(result, run.file("study.png"))
            run.write_json("result.json", to_jsonable({"command": "serving study", **result}))
        return result
