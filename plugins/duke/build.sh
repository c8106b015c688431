#!/bin/sh
# Builds the duke plugin (C + jansson) into OUTDIR with its manifest.
#
#   build.sh OUTDIR
set -eu
outdir=$1
here=$(cd "$(dirname "$0")" && pwd)
include=$here/../../Sources/CAuthBridgePlugin/include
mkdir -p "$outdir"
${CC:-gcc} -std=c11 -O2 -Wall -Wextra -fPIC -shared -fvisibility=hidden -I"$include" \
    $(pkg-config --cflags jansson) -o "$outdir/libauthbridge-duke.so" "$here/duke.c" $(pkg-config --libs jansson)
chmod 0644 "$outdir/libauthbridge-duke.so"
install -m 0644 "$here/duke.json" "$outdir/duke.json"
