"""RRL: SLO-aware tuning of request- and op-level parallelism of a served model (ONNX Runtime or its model)."""

from mlsysopt.serving.backend import Backend, Measurement, Objective
from mlsysopt.serving.space import KNOBS, Config, Space, Workload

__all__ = ["KNOBS", "Backend", "Config", "Measurement", "Objective", "Space", "Workload"]
