#!/bin/sh
# Installs what building and emulating aarch64 code needs, where it is missing: Debian's
# cross compiler and qemu-user-static. Needs root (or sudo) and Debian's package tools.
missing=""
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || missing="$missing g++-aarch64-linux-gnu"
command -v qemu-aarch64-static >/dev/null 2>&1 || missing="$missing qemu-user-static"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
    echo "setup-cross: cannot install$missing (not root, no sudo); aarch64 tests will skip" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup-cross: no apt-get; install$missing by hand; aarch64 tests will skip" >&2
    exit 1
fi
echo "setup-cross: installing$missing"
$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
