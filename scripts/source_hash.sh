#!/usr/bin/env bash
# Prints one hash of the sources a build uses (CMakeLists.txt, include/, src/, tools/), taken
# over the files as they are in the working tree: results from a device call, whose copy of
# the tree may carry older git metadata, can be tied to a commit by running this on a checkout
# of that commit.
set -euo pipefail
cd "$(dirname "$0")/.."
find CMakeLists.txt include src tools -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
  -o -name 'CMakeLists.txt' \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
