#!/bin/sh
# Builds the C test plugin and writes its manifest.
#
#   build.sh OUTDIR [VARIANT_FLAGS...]
#
#   OUTDIR         created if missing; receives LIBNAME and MANIFEST (mode 0644)
#   VARIANT_FLAGS  extra compiler flags, e.g. -DCTEST_INIT_FAILS -DCTEST_PRINT_STDOUT
#
# Environment (all optional):
#   ID        manifest "id" (default ctest); also compiled in as -DCTEST_ID=$ID
#             unless a -DCTEST_ID=... flag is given
#   ABI       manifest "abi" (default: the ABI of plugin.h, which the library declares)
#   LIBNAME   library file name (default libauthbridge-$ID.so)
#   MANIFEST  manifest file name (default $ID.json)
#   CC        compiler (default gcc); CFLAGS are appended (e.g. CFLAGS=-Werror)
#   MANIFEST_EXTRA  raw members appended to the manifest object, written as given,
#             e.g. '"deadlines":{"check_session":1000}' or '"isolation":"process"'
set -eu

if [ $# -lt 1 ]; then
    echo "usage: $0 OUTDIR [VARIANT_FLAGS...]" >&2
    exit 2
fi
outdir=$1
shift

here=$(cd "$(dirname "$0")" && pwd)
include=$here/../../../Sources/CAuthBridgePlugin/include

id=${ID:-ctest}
header_abi=$(sed -n 's/^#define AB_ABI_MAJOR \([0-9]*\)$/\1/p' "$include/authbridge/plugin.h").$(sed -n 's/^#define AB_ABI_MINOR \([0-9]*\)$/\1/p' "$include/authbridge/plugin.h")
abi=${ABI:-$header_abi}
libname=${LIBNAME:-libauthbridge-$id.so}
manifest=${MANIFEST:-$id.json}

idflag=
if [ -n "${ID:-}" ]; then
    idflag="-DCTEST_ID=$ID"
    for f in "$@"; do
        case $f in -DCTEST_ID=*) idflag= ;; esac
    done
fi

(umask 022 && mkdir -p "$outdir")

# Build beside the target and rename, so a running host never sees a half-written file.
tmp=$outdir/.$libname.$$.tmp
trap 'rm -f "$tmp"' EXIT
# shellcheck disable=SC2086  # CFLAGS and idflag are word lists
${CC:-gcc} -shared -fPIC -O2 -Wall -Wextra -fvisibility=hidden -Wl,--no-undefined \
    -I "$include" $idflag "$@" ${CFLAGS:-} \
    -o "$tmp" "$here/ctestplugin.c" -ljansson
chmod 0644 "$tmp"
mv -f "$tmp" "$outdir/$libname"

cat > "$outdir/$manifest.tmp" <<EOF
{
  "id": "$id",
  "version": "1.0.0",
  "abi": "$abi",
  "library": "$libname",
  "description": "Deterministic provider written in C, used by AuthBridge's contract tests"${MANIFEST_EXTRA:+,
  $MANIFEST_EXTRA}
}
EOF
chmod 0644 "$outdir/$manifest.tmp"
mv -f "$outdir/$manifest.tmp" "$outdir/$manifest"
