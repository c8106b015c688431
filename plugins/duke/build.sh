#!/bin/sh
# Builds the duke plugin (C + jansson) into OUTDIR with its manifest.
#
#   build.sh OUTDIR
#
# Environment (optional): CC (default gcc); CFLAGS are appended (e.g. CFLAGS=-Werror).
set -eu
if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
outdir=$1
here=$(cd "$(dirname "$0")" && pwd)
include=$here/../../Sources/CAuthBridgePlugin/include
(umask 022 && mkdir -p "$outdir")

# Build beside the target and rename, so a running host never sees a half-written file.
tmp=$outdir/.libauthbridge-duke.so.$$.tmp
trap 'rm -f "$tmp"' EXIT
# shellcheck disable=SC2046,SC2086  # pkg-config output and CFLAGS are word lists
${CC:-gcc} -std=c11 -O2 -Wall -Wextra -fPIC -shared -fvisibility=hidden -Wl,--no-undefined -I"$include" \
    $(pkg-config --cflags jansson) ${CFLAGS:-} -o "$tmp" "$here/duke.c" $(pkg-config --libs jansson)
chmod 0644 "$tmp"
mv -f "$tmp" "$outdir/libauthbridge-duke.so"
install -m 0644 "$here/duke.json" "$outdir/duke.json"
