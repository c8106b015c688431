#!/bin/sh
# Runs a command with an unlocked gnome-keyring (secrets only) on a private
# session bus, for the Secret Service tests and bench: with-keyring.sh CMD [ARGS...]
# The bus is started here with test-session-bus.conf, which starts nothing on
# demand: the default configuration lets an early client make the bus start a
# second, locked keyring daemon that can win the Secret Service name. The
# keyring's files live in a temporary folder; the command's own XDG_DATA_HOME is
# kept. Every gnome-keyring-daemon of that folder is stopped at exit (the daemon
# outlives its bus otherwise).
set -eu
if [ "${AUTHBRIDGE_KEYRING_BUS:-}" != 1 ]; then
    exec env AUTHBRIDGE_KEYRING_BUS=1 dbus-run-session --config-file="$(dirname "$0")/test-session-bus.conf" -- "$0" "$@"
fi
unset AUTHBRIDGE_KEYRING_BUS
keyrings=$(mktemp -d)
stop_keyrings() {
    for pid in $(pgrep -f gnome-keyring-daemon || true); do
        if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "AUTHBRIDGE_KEYRING_HOME=$keyrings"; then
            kill "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$keyrings"
}
trap stop_keyrings EXIT
export AUTHBRIDGE_KEYRING_HOME="$keyrings"   # marks the daemons started (or activated) for us
# A private keyring folder: an existing login keyring with another password would stay locked.
printf 'authbridge-test' | XDG_DATA_HOME="$keyrings" gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1
# The default collection appears shortly after start-up: wait for it (bounded: 30 s, for a loaded machine).
tries=0
until printf x | secret-tool store --label=probe application authbridge-probe >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ "$tries" -lt 300 ] || { echo "gnome-keyring did not come up" >&2; exit 1; }
    sleep 0.1
done
secret-tool clear application authbridge-probe >/dev/null 2>&1 || true
status=0
AUTHBRIDGE_TEST_KEYRING=1 "$@" || status=$?
exit "$status"
