"""What a prior learned on other models sees of a task: model features, workload features, configuration features.

Every feature is dimensionless or a logarithm, so that one network can learn across models that differ by orders of
magnitude in speed and across machines of 2 to 64 cores:

* **model** (:func:`model_features`, one vector per task): the service profile's behaviour, not its raw fit —
  the time of one single-row single-thread batch (``ref_ms``, dispatch included), how much cheaper a row gets in a
  batch of 16 and 64, how much 2 and all the machine's intra-op threads and 2 and 4 inter-op threads speed up a
  batch of 8, the dispatch share, the machine's cores, and the model's FLOPs, parameters and input bytes per row
  (0 when unknown, e.g. a synthetic profile; a flag says whether they are known);
* **workload** (:func:`workload_features`): the offered load relative to one single-threaded server and to the
  whole machine (``rate * ref_ms / 1000`` and that over the cores), and the request size;
* **configuration** (:func:`config_features`): each knob as log2 of its value (absolute, not its grid position, so
  that grids of different machines agree), the threads relative to the cores, the batch timeout relative to
  ``ref_ms``. No feature computes a configuration's service time from the profile: what a configuration does to a
  model of these features is what the prior has to learn from other models' histories.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from mlsysopt.serving.profile import ServiceProfile
from mlsysopt.serving.space import Config, Workload

MODEL_FEATURES = (
    "log_ref_ms",
    "log_batch16_gain",
    "log_batch64_gain",
    "log_intra2_gain",
    "log_intra_all_gain",
    "log_inter2_gain",
    "log_inter4_gain",
    "dispatch_share",
    "log2_cores",
    "log_flops",
    "log_params",
    "log_input_bytes",
    "facts_known",
)
WORKLOAD_FEATURES = ("log_load_one", "log_load_machine", "log_request_size")
CONFIG_FEATURES = (
    "log2_instances",
    "log2_max_batch",
    "log_timeout",
    "log2_intra",
    "log2_inter",
    "parallel",
    "log2_threads_per_core",
    "log2_instances_per_core",
)


def ref_ms(profile: ServiceProfile) -> float:
    """The profile's unit of time: one single-row batch on one thread, dispatch included (ms)."""
    return profile.batch_ms(1, 1, 1)


def model_features(profile: ServiceProfile) -> np.ndarray:
    """The task's model vector (:data:`MODEL_FEATURES`) from its service profile and model facts."""
    ref = ref_ms(profile)
    s8 = profile.service_ms(8, 1, 1)
    cores = max(int(profile.cores), 1)

    def gain(rows: int, intra: int, inter: int) -> float:
        return math.log(profile.service_ms(rows, min(intra, cores), min(inter, cores)) / s8)

    facts = (profile.flops, profile.n_params, profile.input_bytes)
    known = float(all(v > 0 for v in facts))
    return np.array(
        [
            math.log(ref),
            math.log(profile.batch_ms(16, 1, 1) / (16 * ref)),
            math.log(profile.batch_ms(64, 1, 1) / (64 * ref)),
            gain(8, 2, 1),
            gain(8, cores, 1),
            gain(8, 1, 2),
            gain(8, 1, 4),
            profile.dispatch_ms / ref,
            math.log2(cores),
            *(math.log1p(v) / 10.0 for v in facts),
            known,
        ],
        dtype=np.float64,
    )


def workload_features(workload: Workload, profile: ServiceProfile) -> np.ndarray:
    """The workload vector (:data:`WORKLOAD_FEATURES`): load relative to one server and to the machine."""
    one = workload.rate * ref_ms(profile) / 1000.0
    return np.array(
        [math.log(one), math.log(one / max(profile.cores, 1)), math.log(workload.request_size)], dtype=np.float64
    )


def config_features(configs: Sequence[Config], workload: Workload, profile: ServiceProfile) -> np.ndarray:
    """(n, len(CONFIG_FEATURES)) configuration vectors of ``configs`` under ``workload`` on ``profile``'s machine."""
    ref = ref_ms(profile)
    cores = max(int(profile.cores), 1)
    out = np.empty((len(configs), len(CONFIG_FEATURES)), dtype=np.float64)
    for k, c in enumerate(configs):
        inter = c.effective_inter
        out[k] = (
            math.log2(c.instances),
            math.log2(c.max_batch),
            math.log1p(c.batch_timeout_ms / ref),
            math.log2(c.intra_threads),
            math.log2(inter),
            float(c.parallel),
            math.log2(c.threads / cores),
            math.log2(c.instances / cores),
        )
    return out


def inputs(configs: Sequence[Config], workload: Workload, profile: ServiceProfile) -> np.ndarray:
    """(n, all features) network inputs: model, workload and configuration features side by side."""
    n = len(configs)
    task = np.broadcast_to(model_features(profile), (n, len(MODEL_FEATURES)))
    load = np.broadcast_to(workload_features(workload, profile), (n, len(WORKLOAD_FEATURES)))
    return np.hstack([task, load, config_features(configs, workload, profile)])


N_INPUTS = len(MODEL_FEATURES) + len(WORKLOAD_FEATURES) + len(CONFIG_FEATURES)
