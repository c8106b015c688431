"""A private PostgreSQL cluster for the PostgreSQL vault's tests, started and stopped by the tests.

`PostgresCluster` runs Debian's PostgreSQL (the `postgresql` package: initdb, pg_ctl and postgres,
found on PATH or in /usr/lib/postgresql/*/bin) in a temporary folder: `initdb` there, `pg_ctl
start` listening on a Unix socket in that folder only (no TCP port), `stop` at the end. PostgreSQL
refuses to run as root, so under root (CI) its programs run as `nobody`, who owns the folder.
Superuser work goes through `psql` as the cluster's superuser `postgres`; the hosts connect as
roles the tests create with only the grants the README documents.

As a script, it runs a command with a cluster up and AUTHBRIDGE_TEST_POSTGRES_URL naming a
database owned by an ordinary role (the Swift vault suite's backend):

    postgres.py run -- COMMAND [ARGS...]      (scripts/with-postgres.sh)
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The cluster's superuser (initdb -U).
SUPERUSER = "postgres"
#: pg_ctl's own bound on start and stop (s).
PG_CTL_TIMEOUT = 60


def find_bin() -> Path:
    """The folder of initdb/pg_ctl/postgres: PATH first, else the newest /usr/lib/postgresql/N/bin."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if not versions:
        raise RuntimeError("PostgreSQL is not installed (Debian: apt install postgresql); `make deps` installs it")
    return Path(versions[-1]).parent


class PostgresCluster:
    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.bin = find_bin()
        self.root = Path(tempfile.mkdtemp(prefix="authbridge-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "socket"
        self.log = self.root / "postgres.log"
        self.port = 5432   # names the socket file only: there is no TCP listener
        self.settings = {
            "listen_addresses": "''", "unix_socket_directories": f"'{self.socket_dir}'", "port": str(self.port),
            "max_connections": "200", "shared_buffers": "32MB",
            # A test cluster: no durability needed between runs (a restart is a clean shutdown).
            "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            **(settings or {}),
        }
        self.runs_as = "nobody" if os.geteuid() == 0 else None

    # ── Running its programs ─────────────────────────────────────────────────

    def _as_owner(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", self.runs_as, "--", *argv] if self.runs_as else argv

    def _run(self, argv: list[str], timeout: float = PG_CTL_TIMEOUT) -> subprocess.CompletedProcess:
        done = subprocess.run(self._as_owner(argv), capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed ({done.returncode}):\n{done.stdout}{done.stderr}\n"
                               f"{self.log_text()[-3000:]}")
        return done

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    # ── Life cycle ───────────────────────────────────────────────────────────

    def start(self) -> "PostgresCluster":
        self.socket_dir.mkdir()
        if self.runs_as:
            entry = pwd.getpwnam(self.runs_as)
            for path in (self.root, self.socket_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self.root.chmod(0o700)
        self._run([str(self.bin / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                   "--locale=C", "--no-sync"], timeout=120)
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("".join(f"{key} = {value}\n" for key, value in self.settings.items()))
        self._pg_ctl("start")
        return self

    def _pg_ctl(self, action: str, *extra: str) -> None:
        argv = [str(self.bin / "pg_ctl"), action, "-D", str(self.data), "-w", "-t", str(PG_CTL_TIMEOUT), *extra]
        if action in ("start", "restart"):
            argv += ["-l", str(self.log)]
        self._run(argv, timeout=PG_CTL_TIMEOUT + 10)

    def restart(self) -> None:
        """A fast restart: every connection is closed, then the server is back."""
        self._pg_ctl("restart", "-m", "fast")

    def stop_server(self) -> None:
        self._pg_ctl("stop", "-m", "fast")

    def start_server(self) -> None:
        self._pg_ctl("start")

    def stop(self) -> None:
        """Stops the server (if it runs) and removes the cluster's folder."""
        if (self.data / "postmaster.pid").exists():
            try:
                self._pg_ctl("stop", "-m", "immediate")
            except (RuntimeError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    # ── Using it ─────────────────────────────────────────────────────────────

    def url(self, user: str, database: str) -> str:
        """A libpq connection string for `user` on `database` over the private socket."""
        return f"host={self.socket_dir} port={self.port} dbname={database} user={user}"

    def psql(self, sql: str, database: str = "postgres", user: str = SUPERUSER) -> str:
        """Runs SQL (ON_ERROR_STOP) and returns psql's unaligned, tuples-only output."""
        done = subprocess.run(
            [str(self.bin / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", str(self.socket_dir), "-p", str(self.port),
             "-U", user, "-d", database, "-c", sql],
            capture_output=True, text=True, timeout=60, env={**os.environ, "PGCONNECT_TIMEOUT": "10"})
        if done.returncode != 0:
            raise RuntimeError(f"psql failed: {done.stderr.strip()}\n  SQL: {sql}")
        return done.stdout.strip()

    def create_owner(self, role: str, database: str) -> str:
        """A role that owns `database` (the simplest set-up the README documents); its URL."""
        self.psql(f"CREATE ROLE {role} LOGIN")
        self.psql(f"CREATE DATABASE {database} OWNER {role}")
        return self.url(role, database)

    def __enter__(self) -> "PostgresCluster":
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "run" or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    with PostgresCluster() as cluster:
        url = cluster.create_owner("authbridge_test", "authbridge_test")
        return subprocess.run(argv[2:], env={**os.environ, "AUTHBRIDGE_TEST_POSTGRES_URL": url}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
