"""``python -m mlsysopt.cli``: the ``mlsysopt`` command, with its fixed string-hash seed (:mod:`mlsysopt.hashseed`)."""

from mlsysopt.cli import entry

entry()
