"""Fixtures of the PostgreSQL vault's contract tests (test_postgres_vault.py): a PostgreSQL server
started by the tests (authbridge_testkit.postgres), a database per test set up with exactly the
grants the README's "Running a fleet" documents, and hosts that share it as the machines of a
fleet — each with its own XDG_DATA_HOME and XDG_CONFIG_HOME, the shared key in
AUTHBRIDGE_VAULT_KEY and the database in AUTHBRIDGE_VAULT_URL (never on the command line)."""

from __future__ import annotations

import base64
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pytest

from authbridge_testkit import leak_scan
from authbridge_testkit.host import Host, host_command
from authbridge_testkit.postgres import PostgresCluster

_numbers = itertools.count(1)


@pytest.fixture(scope="module")
def postgres():
    """One server per test module; every statement it runs is logged (log_statement = all, with
    its parameters), so that a test can show no token ever reached the database's log."""
    with PostgresCluster(settings={"log_statement": "'all'", "log_line_prefix": "'%m [%p] %u '"}) as cluster:
        yield cluster


@dataclass
class FleetDatabase:
    """A database a fleet shares: `role` has CONNECT on it and USAGE, CREATE on schema
    authbridge — nothing else (no superuser, not the database's owner)."""
    cluster: PostgresCluster
    name: str
    role: str
    #: The fleet's vault key (AUTHBRIDGE_VAULT_KEY): 32 random bytes in base64.
    key: str

    @property
    def url(self) -> str:
        return self.cluster.url(self.role, self.name)

    def sql(self, statement: str) -> str:
        """Runs SQL in the database as the cluster's superuser (the test's administrator)."""
        return self.cluster.psql(statement, database=self.name)

    def count(self, table: str) -> int:
        return int(self.sql(f"SELECT count(*) FROM authbridge.{table}"))

    def add_role(self, role: str, grants: Iterable[str] = ()) -> str:
        """Another login role with only `grants` (SQL run as the administrator); its URL."""
        self.cluster.psql(f"CREATE ROLE {role} LOGIN")
        for grant in grants:
            self.sql(grant)
        return self.cluster.url(role, self.name)


def make_fleet_database(cluster: PostgresCluster) -> FleetDatabase:
    number = next(_numbers)
    database = FleetDatabase(cluster, f"fleet{number}", f"authbridge_host{number}",
                             base64.b64encode(os.urandom(32)).decode())
    cluster.psql(f"CREATE ROLE {database.role} LOGIN")
    cluster.psql(f"CREATE DATABASE {database.name}")
    # The README's minimal grants.
    cluster.psql(f"REVOKE ALL ON DATABASE {database.name} FROM PUBLIC")
    cluster.psql(f"GRANT CONNECT ON DATABASE {database.name} TO {database.role}")
    database.sql("CREATE SCHEMA authbridge")
    database.sql(f"GRANT USAGE, CREATE ON SCHEMA authbridge TO {database.role}")
    return database


@pytest.fixture
def fleet_db(postgres) -> FleetDatabase:
    return make_fleet_database(postgres)


def machine_command(workdir: Path, plugin_dirs: Iterable[Path], profiles: dict[str, Any], database: FleetDatabase,
                    key: str | None = None, url: str | None = None, log_level: str = "notice",
                    extra_args: Iterable[str] = ()) -> tuple[list[str], dict[str, str]]:
    """argv and environment of one machine's `authbridge serve --vault postgresql`."""
    argv, env = host_command(workdir, plugin_dirs, profiles=profiles, log_level=log_level,
                             extra_args=["--vault", "postgresql", *extra_args])
    env["AUTHBRIDGE_VAULT_URL"] = url or database.url
    env["AUTHBRIDGE_VAULT_KEY"] = key or database.key
    return argv, env


class Machines:
    """Validated hosts (the kit's Host), one per machine of a fleet; all stopped by `stop_all`,
    which reports the frame violations and leaks they recorded."""

    def __init__(self, root: Path, plugin_dir: Path, profiles: dict[str, Any], database: FleetDatabase) -> None:
        self.root, self.plugin_dir, self.profiles, self.database = root, plugin_dir, profiles, database
        self.hosts: list[Host] = []

    def start(self, name: str, initialize: bool = True, **options: Any) -> Host:
        argv, env = machine_command(self.root / name, [self.plugin_dir], self.profiles, self.database, **options)
        host = Host(argv, env, self.root / name)
        self.hosts.append(host)
        if initialize:
            host.initialize()
        return host

    def stop_all(self) -> list[str]:
        problems = []
        for host in self.hosts:
            host.stop()
            problems += [f"{host.workdir.name}: {v.splitlines()[0]}" for v in host.violations]
            problems += [f"{host.workdir.name}: a code or token in {place}"
                         for place in leak_scan.leaks(host.stderr_text(), host.frames)]
        return problems


@pytest.fixture
def machines(tmp_path, oidc_plugin_dir, fleet_db):
    """Factory machines(profiles) → Machines on `fleet_db`; stopped at teardown, where a frame
    violation or a leak fails the test."""
    made: list[Machines] = []

    def make(profiles: dict[str, Any]) -> Machines:
        made.append(Machines(tmp_path, oidc_plugin_dir, profiles, fleet_db))
        return made[-1]

    yield make
    problems = [problem for fleet in made for problem in fleet.stop_all()]
    assert not problems, "\n".join(problems)
