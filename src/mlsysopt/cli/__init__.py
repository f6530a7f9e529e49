"""The ``mlsysopt`` command line: ``mlsysopt <system> <verb>``.

Heavy imports (numba, torch, matplotlib, wfcommons) happen inside the commands that need them (each marked
``# deferred:``), so ``--help`` starts fast. :func:`main` turns every way a command can fail on its input into one red
``error: ...`` line on stderr, never a traceback:

====  =====================================================================================================
exit  meaning
====  =====================================================================================================
0     done
2     refused: a bad option or argument (typer's usage and range errors too), an unreadable or malformed
      input file, a file-system error (missing, not writable, read-only, disk full, ...), a size beyond
      this machine's limits, a missing dependency, input nested too deeply
1     an internal error (a bug in mlsysopt, not a refused input): one line too; ``MLSYSOPT_DEBUG=1`` shows it
130   interrupted (Ctrl-C); a run that keeps a checkpoint continues with ``--resume``
143   stopped by SIGTERM (``kill``, systemd, Slurm, Kubernetes), handled like Ctrl-C: checkpoint kept, lock
      released, one line; 129 for SIGHUP (the terminal closed)
====  =====================================================================================================

``MLSYSOPT_DEBUG=1`` (or ``true``/``yes``) re-raises instead, with the traceback. Library warnings
(:class:`~mlsysopt.errors.MlsysoptWarning`) print as one ``warning: ...`` line each.
"""

from __future__ import annotations

from mlsysopt.hashseed import fixed_hash_seed
from mlsysopt.lazy import lazy_exports

# The app and every command load only when used: the console entry point below first fixes the hash seed, which may
# re-run the process, and should not have paid for typer and the commands (~0.3 s) before that.
_EXPORTS = {
    name: "mlsysopt.cli.command" for name in ("app", "debug_enabled", "main", "run", "stop_signals_as_interrupts")
}


def entry() -> None:
    """The ``mlsysopt`` console script: one string-hash seed for the run (:mod:`mlsysopt.hashseed`), then
    :func:`main`."""
    fixed_hash_seed()
    from mlsysopt.cli.command import main  # deferred: only in the process that runs the command

    main()


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "entry"])
