"""``python -m mlsysopt.cli``: the ``mlsysopt`` command, with its fixed string-hash seed (:mod:`mlsysopt.hashseed`)."""

from mlsysopt.cli import main
from mlsysopt.hashseed import fixed_hash_seed

fixed_hash_seed()
main()
