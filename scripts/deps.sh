#!/usr/bin/env bash
# Installs the Debian packages mlxrt needs to build and test (only those missing).
set -euo pipefail
PKGS="build-essential cmake pkg-config libcjson-dev libmicrohttpd-dev curl python3 python3-venv python3-pip git"
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing:$missing" >&2
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >&2
