#!/bin/sh
# Builds the duke plugin (plugins/duke) and the stand-in host (harness.c) into WORKDIR and runs every hook
# under valgrind: exit 0 only when every check passes with no memory error and no leak.
#
#   run.sh WORKDIR
set -eu
work=${1:?usage: run.sh WORKDIR}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
include=$repo/Sources/CAuthBridgePlugin/include
mkdir -p "$work"
CFLAGS="-g -O1" sh "$repo/plugins/duke/build.sh" "$work"
# shellcheck disable=SC2046
${CC:-gcc} -std=c11 -g -O0 -Wall -Wextra -I"$include" $(pkg-config --cflags jansson) \
    -o "$work/duke-harness" "$here/harness.c" $(pkg-config --libs jansson) -ldl
exec valgrind --quiet --leak-check=full --show-leak-kinds=definite,indirect,possible \
    --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=3 \
    "$work/duke-harness" "$work/libauthbridge-duke.so"
