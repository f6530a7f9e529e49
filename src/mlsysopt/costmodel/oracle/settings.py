"""The settings a latency is recorded under: engine, intra-op threads, execution mode and batch.

A setting is one string, ``ort-t2-par-b8`` (ONNX Runtime, 2 intra-op threads, parallel execution, batch 8) or
``torch-t1-b1`` (PyTorch eager, 1 thread, batch 1). :data:`SETTINGS` lists the twelve the collection records.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlsysopt.errors import InvalidOption

ENGINES = ("onnxruntime", "torch")
MODES = ("seq", "par")
THREADS = (1, 2)
BATCHES = (1, 8)


@dataclass(frozen=True)
class Setting:
    """How a model is run: ``engine`` (onnxruntime or torch), intra-op ``threads``, ``mode`` (ONNX Runtime's
    sequential or parallel executor; torch is always ``seq``) and ``batch``."""

    engine: str
    threads: int
    mode: str
    batch: int

    @property
    def key(self) -> str:
        """The setting's name, e.g. ``ort-t2-par-b8`` or ``torch-t1-b1``."""
        if self.engine == "torch":
            return f"torch-t{self.threads}-b{self.batch}"
        return f"ort-t{self.threads}-{self.mode}-b{self.batch}"

    @classmethod
    def parse(cls, key: str) -> Setting:
        """The setting named ``key`` (the inverse of :attr:`key`).

        Raises:
            InvalidOption: If ``key`` names no setting.
        """
        parts = key.split("-")
        try:
            if parts[0] == "torch" and len(parts) == 3:
                return cls("torch", int(parts[1][1:]), "seq", int(parts[2][1:]))
            if parts[0] == "ort" and len(parts) == 4 and parts[2] in MODES:
                return cls("onnxruntime", int(parts[1][1:]), parts[2], int(parts[3][1:]))
        except ValueError:
            pass
        raise InvalidOption(f"'{key}' names no setting (e.g. ort-t2-par-b8, torch-t1-b1)")


def make_setting(engine: str = "onnxruntime", threads: int = 1, mode: str = "seq", batch: int = 1) -> Setting:
    """A validated :class:`Setting` from command-line values.

    Raises:
        InvalidOption: Naming the option (``--engine``, ``--threads``, ``--mode``, ``--batch``) that is out of range.
    """
    if engine not in ENGINES:
        raise InvalidOption(f"--engine must be one of {', '.join(ENGINES)}, got '{engine}'")
    if mode not in MODES:
        raise InvalidOption(f"--mode must be one of {', '.join(MODES)}, got '{mode}'")
    for name, value, hi in (("--threads", threads, 64), ("--batch", batch, 4096)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= hi:
            raise InvalidOption(f"{name} must be an integer in 1..{hi}, got {value!r}")
    if engine == "torch" and mode != "seq":
        raise InvalidOption("--mode par is ONNX Runtime's parallel executor; PyTorch eager runs seq only")
    return Setting(engine, threads, mode, batch)


#: The twelve settings the collection records per model.
SETTINGS: tuple[Setting, ...] = tuple(
    [Setting("onnxruntime", t, m, b) for b in BATCHES for t in THREADS for m in MODES]
    + [Setting("torch", t, "seq", b) for b in BATCHES for t in THREADS]
)
