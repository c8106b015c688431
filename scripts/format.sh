#!/bin/sh
# The Swift and C sources in the house style (.swift-format: swift-format of the toolchain;
# .clang-format: Debian's clang-format): `make format` rewrites them, `make lint` (--check)
# fails on any difference. Generated Swift (OpenRPCDocument.swift by scripts/spec.py,
# SwiftRuntimeLadder.swift by scripts/swift-runtime-ladder.py) is left as its generator writes it.
set -eu
cd "$(dirname "$0")/.."
swift_files=$(git ls-files '*.swift' | grep -v -e '/OpenRPCDocument\.swift$' -e '/SwiftRuntimeLadder\.swift$')
c_files=$(git ls-files '*.c' '*.h')
if [ "${1:-}" = --check ]; then
    # shellcheck disable=SC2086 # word splitting wanted: file lists
    ${SWIFT:-swift} format lint --strict --parallel $swift_files
    clang-format --dry-run -Werror $c_files
else
    ${SWIFT:-swift} format format --in-place --parallel $swift_files
    clang-format -i $c_files
fi
