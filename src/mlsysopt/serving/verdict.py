"""Honest verdicts: the confirmed pick against the confirmed default, in words, and how much confirmation noise needs.

A tune's answer is a recommendation a user deploys, so it is decided on **confirmed** values only (the
interleaved re-measurements of :func:`~mlsysopt.serving.confirmation.confirm`), never on the search-time value
that won the search (a lucky window is biased low):

* the pick **misses the SLO** -> "SLO missed": no deployment files unless asked (``--export-anyway``);
* the pick *is* the default -> "keep the default": the runtime's default was the best confirmed configuration;
* the default misses the SLO and the pick meets it -> "use the pick";
* the two 95% intervals of the confirmed medians **overlap** -> "cannot tell here, keep the default": the measured
  gain is within the noise of this machine (the words give both intervals);
* otherwise "use the pick", with the confirmed gain and both intervals.

:func:`rounds_for_noise` sizes the confirmation by the noise measured at the start of the tune: an interval's width
grows with the coefficient of variation and shrinks with the square root of the rounds, so above
:data:`NOISE_CV` = 0.1 the rounds grow with (CV / 0.1)^2 (at most 4x the asked number); above :data:`HIGH_NOISE`
= 0.2 the tune warns with the figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mlsysopt.io import to_jsonable
from mlsysopt.serving.confirmation import Confirmation, Confirmed
from mlsysopt.serving.objective import Objective

NOISE_CV = 0.10  # the noise the asked confirmation rounds are sized for
HIGH_NOISE = 0.20  # above this CV (of mean latency over repeated windows) a tune warns
MAX_ROUNDS_FACTOR = 4

USE_PICK = "use the pick"
KEEP_DEFAULT = "keep the default"
SLO_MISSED = "SLO missed"


def rounds_for_noise(rounds: int, cv: float | None) -> int:
    """Confirmation rounds for measured noise ``cv``: ``rounds`` up to CV 0.1, x (CV / 0.1)^2 above, at most 4x."""
    if cv is None or not math.isfinite(cv) or cv <= NOISE_CV:
        return rounds if cv is None or math.isfinite(cv) else rounds * MAX_ROUNDS_FACTOR
    return min(rounds * MAX_ROUNDS_FACTOR, math.ceil(rounds * (cv / NOISE_CV) ** 2))


def noise_warning(noise: dict[str, Any], rounds: int, asked: int) -> str | None:
    """A warning in words when the measured noise is high (CV > 0.2), else None."""
    cv = noise.get("cv_mean_ms")
    if cv is not None and math.isfinite(cv) and cv <= HIGH_NOISE:
        return None
    shown = "not measurable (a window failed)" if cv is None or not math.isfinite(cv) else f"{cv:.0%}"
    more = f"; confirmation rounds raised from {asked} to {rounds}" if rounds > asked else ""
    return (
        f"high noise: the default's mean latency varied by CV {shown} over {noise.get('windows')} windows (above "
        f"{HIGH_NOISE:.0%}): differences smaller than that are not real{more}"
    )


@dataclass
class Verdict:
    """The decision of one rate's confirmation: use the pick, keep the default, or SLO missed, and why."""

    decision: str
    words: str
    pick: Confirmed
    default: Confirmed
    recommended: Confirmed  # what the deployment files describe: the pick, or the default
    gain: float | None  # relative gain of the pick over the default on confirmed medians (>0: better)
    overlap: bool | None  # whether the 95% intervals of the confirmed medians overlap

    @property
    def export(self) -> bool:
        """Whether deployment files are written without ``--export-anyway``."""
        return self.decision != SLO_MISSED

    def to_dict(self, objective: Objective) -> dict[str, Any]:
        """A JSON-ready dict (values in the objective's unit and in words)."""
        return to_jsonable(
            {
                "decision": self.decision,
                "words": self.words,
                "pick": self.pick.config.to_dict(),
                "pick_confirmed": objective.describe(self.pick.value),
                "pick_interval": list(self.pick.interval),
                "default": self.default.config.to_dict(),
                "default_confirmed": objective.describe(self.default.value),
                "default_interval": list(self.default.interval),
                "recommended": self.recommended.config.to_dict(),
                "gain": self.gain,
                "intervals_overlap": self.overlap,
            }
        )


def _gain(objective: Objective, pick: Confirmed, default: Confirmed) -> float | None:
    a, b = objective.value(pick.value), objective.value(default.value)
    if a is None or b is None or b == 0:
        return None
    return (a - b) / b if objective.kind == "throughput" else (b - a) / b


def _interval(objective: Objective, c: Confirmed) -> str:
    lo, hi = (objective.describe(v) for v in c.interval)
    return f"{objective.describe(c.value)} (95% {lo} .. {hi})"


def verdict(confirmation: Confirmation, objective: Objective, runtime: str = "ONNX Runtime") -> Verdict:
    """The honest answer of one rate: pick vs default on confirmed medians and their 95% intervals.

    Args:
        confirmation: The rate's confirmation (pick and default re-measured, interleaved).
        objective: What was optimized.
        runtime: Whose default the default is, in the words (``"ONNX Runtime"``, ``"Ray Serve"``).

    Returns:
        Verdict: The decision, its words and the recommended configuration.
    """
    pick = confirmation.pick
    default = confirmation.default_candidate
    gain = _gain(objective, pick, default)
    label = pick.config.label()
    if objective.slo_ms is not None and pick.meets_slo is False:
        m = pick.measurement
        why = (
            f"p99 {m.p99_ms:.3g} ms but the server fell behind the offered load (dropped requests, a growing queue "
            "or throughput below 95% of the rate)"
            if m.saturated and objective.meets_slo(m.p99_ms)
            else f"p99 {m.p99_ms:.3g} ms"
        )
        words = (
            f"SLO missed: no confirmed configuration meets p99 <= {objective.slo_ms:g} ms without saturating; the "
            f"closest, {label}, has {why}; no deployment files are written (--export-anyway writes them)"
        )
        return Verdict(SLO_MISSED, words, pick, default, pick, gain, None)
    if pick.config == default.config:
        words = (
            f"keep the default: {runtime}'s default {label} is the best confirmed configuration "
            f"({_interval(objective, pick)})"
        )
        return Verdict(KEEP_DEFAULT, words, pick, default, default, 0.0, True)
    if objective.slo_ms is not None and default.meets_slo is False:
        words = (
            f"use the pick: {label} meets p99 <= {objective.slo_ms:g} ms with {_interval(objective, pick)}; the "
            f"default {default.config.label()} misses the SLO (p99 {default.measurement.p99_ms:.3g} ms)"
        )
        return Verdict(USE_PICK, words, pick, default, pick, gain, False)
    overlap = pick.interval[0] <= default.interval[1] and default.interval[0] <= pick.interval[1]
    up = objective.kind == "throughput"
    better = "n/a" if gain is None else f"{abs(gain):.1%} {'higher' if (gain >= 0) == up else 'lower'}"
    if overlap:
        words = (
            f"cannot tell here, keep the default: the pick {label}, {_interval(objective, pick)}, and the default "
            f"{default.config.label()}, {_interval(objective, default)}, overlap ({better} on the medians is "
            "within the noise of this machine)"
        )
        return Verdict(KEEP_DEFAULT, words, pick, default, default, gain, True)
    words = (
        f"use the pick: {label}, {_interval(objective, pick)}, is {better} than the default "
        f"{default.config.label()}, {_interval(objective, default)} (confirmed, intervals apart)"
    )
    return Verdict(USE_PICK, words, pick, default, pick, gain, False)
