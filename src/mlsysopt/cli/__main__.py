"""``python -m mlsysopt.cli``."""

from mlsysopt.cli import main

main()
