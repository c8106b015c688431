#!/bin/sh
# Runs a command with an unlocked gnome-keyring (secrets only) on the session
# bus, for the Secret Service tests and bench: with-keyring.sh CMD [ARGS...]
# Used inside `dbus-run-session -- scripts/with-keyring.sh ...`. The keyring's
# files live in a temporary folder; the command's own XDG_DATA_HOME is kept.
set -eu
# A private keyring folder: an existing login keyring with another password would stay locked.
keyrings=$(mktemp -d)
trap 'rm -rf "$keyrings"' EXIT
eval "$(printf 'authbridge-test' | XDG_DATA_HOME="$keyrings" gnome-keyring-daemon --unlock --components=secrets)" >/dev/null
# The default collection appears shortly after start-up: wait for it (bounded).
tries=0
until printf x | secret-tool store --label=probe application authbridge-bench-probe >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ "$tries" -lt 100 ] || { echo "gnome-keyring did not come up" >&2; exit 1; }
    sleep 0.1
done
secret-tool clear application authbridge-bench-probe >/dev/null 2>&1 || true
AUTHBRIDGE_TEST_KEYRING=1 "$@"
