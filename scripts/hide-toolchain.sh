#!/bin/sh
# Runs a command with the Swift toolchain and the build folder hidden: in a private mount
# namespace an empty folder is bound over the toolchain's root (the folder above usr/bin/swiftc)
# and over the build products (.build/<triple>), so that nothing can be loaded from either — what
# a machine without Swift looks like to the distributions in dist/ (Tests/dist).
#
#   scripts/hide-toolchain.sh COMMAND [ARG...]
#
# As root `unshare -m`; otherwise `unshare -r -m` (a user namespace, where the caller is root).
# The command sees AUTHBRIDGE_HIDDEN="TOOLCHAIN_ROOT BUILD_PRODUCTS" and can check both are empty.
set -eu
swiftc=$(command -v swiftc) || { echo "hide-toolchain.sh: no swiftc on PATH" >&2; exit 2; }
toolchain=$(dirname "$(dirname "$(dirname "$(readlink -f "$swiftc")")")")
repo=$(cd "$(dirname "$0")/.." && pwd)
products=$(find "$repo/.build" -mindepth 1 -maxdepth 1 -type d -name '*-*-*' | head -n 1)
[ -n "$products" ] || { echo "hide-toolchain.sh: no build products in $repo/.build" >&2; exit 2; }
empty=$(mktemp -d)
trap 'rmdir "$empty"' EXIT
if [ "$(id -u)" = 0 ]; then flags=-m; else flags="-r -m"; fi
AUTHBRIDGE_HIDDEN="$toolchain $products" unshare $flags sh -c '
  mount --bind "$1" "$2" && mount --bind "$1" "$3" && shift 3 && exec "$@"' sh "$empty" "$toolchain" "$products" "$@"
