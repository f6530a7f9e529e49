"""Fixtures of the store's tests: a fresh database on the session's PostgreSQL server per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

_numbers = itertools.count()


@pytest.fixture
def pg_url(postgres) -> Iterator[str]:
    """A new, empty database on the shared server (so tests never see each other's studies)."""
    import psycopg2

    name = f"t{next(_numbers)}_{id(object()) % 10**6}"
    con = psycopg2.connect(host=str(postgres.folder), port=postgres.port, user="mlsysopt", dbname="mlsysopt")
    con.autocommit = True
    con.cursor().execute(f"CREATE DATABASE {name}")
    con.close()
    yield postgres.url.rsplit("/", 1)[0] + f"/{name}"
