#!/bin/sh
# Runs a command with a private D-Bus session bus and an unlocked gnome-keyring
# (secrets only), as the Secret Service tests do: with-keyring.sh CMD [ARGS...]
# Used inside `dbus-run-session -- bench/with-keyring.sh ...`.
set -eu
# A private keyring folder: an existing login keyring with another password would stay locked.
keyrings=$(mktemp -d)
trap 'rm -rf "$keyrings"' EXIT
export XDG_DATA_HOME="$keyrings"
eval "$(printf 'authbridge-bench' | gnome-keyring-daemon --unlock --components=secrets)" >/dev/null
# The default collection appears shortly after start-up: wait for it (bounded).
tries=0
until printf x | secret-tool store --label=probe application authbridge-bench-probe >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ "$tries" -lt 100 ] || { echo "gnome-keyring did not come up" >&2; exit 1; }
    sleep 0.1
done
secret-tool clear application authbridge-bench-probe >/dev/null 2>&1 || true
"$@"
