#!/bin/sh
# Installs the Debian packages the test suite talks to, if they are missing: redis-cli and
# redis-benchmark (redis-tools), redis-server, redis-sentinel, Debian's Python redis client (python3-redis, for /usr/bin/python3:
# the tests run that interpreter, not a pyenv one), and nginx with its Lua module and lua-resty-redis
# for the gateway recipe's test (examples/nginx). Needs root (or sudo).
set -eu
missing=""
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
command -v redis-benchmark >/dev/null 2>&1 || case "$missing" in *redis-tools*) ;; *) missing="$missing redis-tools" ;; esac
# redis-server: tests compare cellgate's replies with the real Redis's, and the benchmarks run it.
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
# redis-sentinel: the backend's Sentinel tests run their own sentinels beside a master and a replica.
command -v redis-sentinel >/dev/null 2>&1 || missing="$missing redis-sentinel"
# openssl makes the TLS tests' certificates; ip (iproute2) gives the protected-mode test its own
# network namespace. Without them those tests skip, saying why.
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
# nginx, libnginx-mod-http-lua (with ndk) and lua-nginx-redis (lua-resty-redis as `nginx.redis`): the
# tests run their own nginx processes on free loopback ports (test/gateway/nginx.test.ts).
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$missing nginx"
[ -f /usr/lib/nginx/modules/ngx_http_lua_module.so ] || missing="$missing libnginx-mod-http-lua"
[ -f /usr/share/lua/5.1/nginx/redis.lua ] || missing="$missing lua-nginx-redis"
PY=/usr/bin/python3; [ -x $PY ] || PY=python3
$PY -c 'import redis' >/dev/null 2>&1 || missing="$missing python3-redis"
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
echo "installing:$missing"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
# Installing nginx starts the system's nginx on port 80 where an init system runs services (not in a
# container without one): the tests need none of it, so stop it if it runs.
# Likewise redis-sentinel's package starts the system's sentinel on 26379 where an init system runs.
case "$missing" in
  *redis-sentinel*)
    command -v systemctl >/dev/null 2>&1 && $SUDO systemctl disable --now redis-sentinel >/dev/null 2>&1 || true
    ;;
esac
case "$missing" in
  *nginx*)
    if [ -f /run/nginx.pid ] && kill -0 "$(cat /run/nginx.pid)" 2>/dev/null; then
      $SUDO nginx -s quit 2>/dev/null || true
      command -v systemctl >/dev/null 2>&1 && $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true
    fi
    ;;
esac
