"""The ``mlsysopt`` command and ``python -m mlsysopt``: a fixed string-hash seed (:mod:`mlsysopt.hashseed`), then
the command line."""

from __future__ import annotations

from mlsysopt.hashseed import fixed_hash_seed


def main() -> None:
    """Console entry point: fix the hash seed, then run the command line (exits with its code)."""
    fixed_hash_seed()
    # deferred: the CLI (typer and every command's options, ~0.3 s) loads only in the process that runs it
    from mlsysopt.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
