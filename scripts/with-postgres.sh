#!/bin/sh
# Runs a command with a private PostgreSQL cluster, for the PostgreSQL vault's Swift tests:
# with-postgres.sh CMD [ARGS...]. The cluster (Tests/support/authbridge_testkit/postgres.py)
# lives in a temporary folder and listens on a Unix socket there only; the command gets
# AUTHBRIDGE_TEST_POSTGRES_URL, a database owned by an ordinary role. Stopped and removed at exit.
set -eu
exec "${PYTHON:-python3}" "$(dirname "$0")/../Tests/support/authbridge_testkit/postgres.py" run -- "$@"
