"""File input and output shared by every package: atomic writes, strict JSON, guarded reads, the run folder."""

from mlsysopt.io.files import (
    load_torch,
    open_atomic,
    remove_stale_temps,
    safe_first_line,
    save_torch_atomic,
    write_atomic,
)
from mlsysopt.io.jsonio import (
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    dumps,
    loads_json,
    read_json,
    to_jsonable,
    write_json_atomic,
)
from mlsysopt.io.rundir import RunDir

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "RunDir",
    "dumps",
    "load_torch",
    "loads_json",
    "open_atomic",
    "read_json",
    "remove_stale_temps",
    "safe_first_line",
    "save_torch_atomic",
    "to_jsonable",
    "write_atomic",
    "write_json_atomic",
]
