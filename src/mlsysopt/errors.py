"""One exception root for the whole library; each domain has its own subclass."""


class MlsysoptError(Exception):
    """Root of every error mlsysopt raises on purpose; the CLI prints its message and exits 2."""


class InvalidGraph(MlsysoptError):
    """A computation graph is malformed: cycle, bad edge, non-finite feature, empty, ..."""


class InvalidCluster(MlsysoptError):
    """A device cluster is malformed: non-positive speed or bandwidth, disconnected devices, ..."""


class InvalidPlacement(MlsysoptError):
    """A placement names an unknown task or device, or has the wrong shape."""


class ConstraintViolation(InvalidPlacement):
    """A hard constraint is violated, e.g. a task on a device that does not support its hardware type."""


class UnsupportedFormat(MlsysoptError):
    """A file is of a format mlsysopt cannot read, or is not what its extension claims."""


class ImportFailed(MlsysoptError):
    """An importer could not turn a model or workflow into a CompGraph (e.g. torch.fx cannot trace it)."""


class UserCodeFailed(ImportFailed):
    """User code (a factory or an objective, run in a child process) exited, crashed, was killed or ran too long."""


class InvalidSpace(MlsysoptError):
    """A configuration space or workload is malformed: empty, a knob outside the machine, a bad rate or SLO."""


class InvalidModel(MlsysoptError):
    """A model cannot be served: the file does not load, or its inputs cannot be batched or built."""


class InvalidArchitecture(MlsysoptError):
    """A NAS architecture is malformed: wrong number of choices, an option out of range, an unknown op, ..."""


class InvalidDataset(MlsysoptError):
    """A NAS dataset is unknown, or a dataset folder is not in the expected layout."""


class InvalidConstraint(MlsysoptError):
    """A NAS resource constraint is unknown, has a non-positive limit, or names a resource the space lacks."""


class ConstraintUnreachable(InvalidConstraint):
    """No architecture of the many a NAS search checked meets a limit on a costly resource (e.g. a latency)."""


class InvalidDataFile(MlsysoptError):
    """A cost-model data file (TpuGraphs .npz, MalNet edgelist, split file) is malformed; names file and key."""


class InvalidOption(MlsysoptError):
    """An option is malformed or out of range: a shape, segment size < 1, SED probability outside [0, 1), ..."""


class InvalidCheckpoint(MlsysoptError):
    """A checkpoint is unreadable or was written by an incompatible model (different task, sizes or backbone)."""


class InvalidRunDir(MlsysoptError):
    """A run folder cannot be used: it is a file, another process holds it, or --resume does not match it."""


class WriteFailed(MlsysoptError):
    """An output file could not be written: the disk is full or read-only, or the folder is not writable."""


class StoreError(MlsysoptError):
    """The study store cannot be used: a malformed or unreachable ``--storage``, a store of a newer schema, SQLite
    used unsafely (a network file system, another host, locked past its timeout), a study that does not fit."""


class StoreBusy(StoreError):
    """A store write met a lock held by other writers (SQLite past its timeout): nothing was written, and the same
    write may succeed when tried again (:func:`mlsysopt.store.writer.retry` does)."""


class MissingSplit(InvalidDataFile):
    """A cost-model data root has no such split (no ``split/*.npz`` folder, no ``split_info/split.txt``)."""


class MlsysoptWarning(UserWarning):
    """Something mlsysopt could read but distrusts: an op without a FLOP formula, a task without a runtime, ...

    The CLI prints each one as a single ``warning: ...`` line on stderr; library users get a normal Python warning.
    """
