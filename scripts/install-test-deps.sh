#!/bin/sh
# Installs the Debian packages the test suite talks to, if they are missing: redis-cli and
# redis-benchmark (redis-tools), redis-server, and Debian's Python redis client (python3-redis, for /usr/bin/python3:
# the tests run that interpreter, not a pyenv one). Needs root (or sudo).
set -eu
missing=""
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
command -v redis-benchmark >/dev/null 2>&1 || case "$missing" in *redis-tools*) ;; *) missing="$missing redis-tools" ;; esac
# redis-server: tests compare cellgate's replies with the real Redis's, and the benchmarks run it.
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
# openssl makes the TLS tests' certificates; ip (iproute2) gives the protected-mode test its own
# network namespace. Without them those tests skip, saying why.
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
$PY -c 'import redis' >/dev/null 2>&1 || missing="$missing python3-redis"
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
echo "installing:$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
