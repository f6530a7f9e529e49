"""One string-hash seed for every run of the ``mlsysopt`` command (:func:`fixed_hash_seed`).

Python salts the hash of every ``str`` per process, and a set of strings is iterated in the order of those hashes.
saga's schedulers keep ready tasks and free devices in sets of names, so where two of them tie (equal start or finish
times) a saga schedule, the placement portfolio's best start and the search after it could differ between two runs
of the same command with the same ``--seed``. So the command runs with ``PYTHONHASHSEED=0`` unless the environment
already sets it (``PYTHONHASHSEED=random`` keeps Python's salt): when it is unset, the process replaces itself once
with the same command line and that variable, before anything heavy is imported (~20 ms). The processes the command
starts (pool workers, a private Ray instance's workers) inherit it; a Ray cluster started elsewhere needs it in its
own environment. The console script :func:`mlsysopt.cli.entry` calls it first; calling :func:`mlsysopt.cli.main`
inside your own Python process changes nothing there.
"""

from __future__ import annotations

import os
import sys


def fixed_hash_seed() -> None:
    """Re-run this process with ``PYTHONHASHSEED=0`` when the environment does not set it (no return then)."""
    if "PYTHONHASHSEED" in os.environ or not sys.flags.hash_randomization:
        return
    os.environ["PYTHONHASHSEED"] = "0"
    try:
        os.execv(sys.executable, sys.orig_argv)
    except OSError:  # the interpreter cannot be started again: run on, salted as before
        del os.environ["PYTHONHASHSEED"]
