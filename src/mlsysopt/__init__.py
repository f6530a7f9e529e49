"""mlsysopt: learning to optimize ML systems on one computation-graph IR and one DAG simulator."""

from mlsysopt.errors import (
    ConstraintViolation,
    ImportFailed,
    InvalidCluster,
    InvalidGraph,
    InvalidPlacement,
    MlsysoptError,
    UnsupportedFormat,
)

__version__ = "0.1.0"

__all__ = [
    "ConstraintViolation",
    "ImportFailed",
    "InvalidCluster",
    "InvalidGraph",
    "InvalidPlacement",
    "MlsysoptError",
    "UnsupportedFormat",
    "__version__",
]
