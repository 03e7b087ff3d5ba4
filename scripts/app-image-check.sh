#!/bin/bash
# app-image-check.sh — builds the example app image (examples/replicas/app.Dockerfile) and the cellgate
# image (Dockerfile) with podman (or docker: ENGINE=docker), runs them as examples/replicas/docker-compose.yml
# runs one replica (the app in its sidecar's network namespace, asking cellgate on 127.0.0.1:6379),
# and checks over HTTP from the host that the app answers GET /api/hello with cellgate's RateLimit
# field up to the limit, then 429 (10 requests per 10 s per API key).
#
#   bash scripts/app-image-check.sh            # from anywhere; needs podman (or docker) and curl
#
# Env: ENGINE (podman), HPORT (host port for the app, 13000), APP_IMAGE, CELLGATE_IMAGE (the tags
# built), SKIP_CELLGATE_BUILD=1 (use CELLGATE_IMAGE as it is). The base image node:24-bookworm-slim is
# pulled if it is not there. test/build/dockerfiles.test.ts checks the same two Dockerfiles without
# a container engine, in `npm test`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ENGINE=${ENGINE:-podman}
HPORT=${HPORT:-13000}
APP_IMAGE=${APP_IMAGE:-localhost/cellgate-example-app:check}
CELLGATE_IMAGE=${CELLGATE_IMAGE:-localhost/cellgate:check}
fail() { echo "FAIL: $*"; exit 1; }
command -v "$ENGINE" >/dev/null || fail "$ENGINE is not installed"
command -v curl >/dev/null || fail "curl is not installed"

# Docker (BuildKit) reads app.Dockerfile.dockerignore beside the Dockerfile by itself; podman is told.
ignore=()
[ "$ENGINE" = podman ] && ignore=(--format docker --ignorefile "$ROOT/examples/replicas/app.Dockerfile.dockerignore")
"$ENGINE" build "${ignore[@]}" -f "$ROOT/examples/replicas/app.Dockerfile" -t "$APP_IMAGE" "$ROOT"
if [ -z "${SKIP_CELLGATE_BUILD:-}" ]; then
  fmt=(); [ "$ENGINE" = podman ] && fmt=(--format docker)
  "$ENGINE" build "${fmt[@]}" -f "$ROOT/Dockerfile" -t "$CELLGATE_IMAGE" "$ROOT"
fi

# The sidecar owns the network namespace and publishes the app's port (the compose file's layout).
sidecar=$("$ENGINE" run -d -p "127.0.0.1:$HPORT:3000" "$CELLGATE_IMAGE" --bind 127.0.0.1 --port 6379)
app=
cleanup() {
  [ -n "$app" ] && "$ENGINE" rm -f -t 5 "$app" >/dev/null 2>&1 || true
  "$ENGINE" rm -f -t 5 "$sidecar" >/dev/null 2>&1 || true
}
trap cleanup EXIT
app=$("$ENGINE" run -d --network "container:$sidecar" -e HOST=0.0.0.0 -e PORT=3000 \
  -e CELLGATE_URL=redis://127.0.0.1:6379 -e CELLGATE_UNAVAILABLE=deny -e API_KEYS=demo "$APP_IMAGE")
[ "$("$ENGINE" inspect -f '{{.Config.User}}' "$app")" = node ] || fail "the app image does not run as node"

# Up when the app answers with cellgate's field (CELLGATE_UNAVAILABLE=deny: a 503 until cellgate answers).
up=
for _ in $(seq 1 60); do
  if curl -fsS -o /dev/null -H 'X-API-Key: warm-up' "http://127.0.0.1:$HPORT/api/hello" 2>/dev/null; then up=1; break; fi
  [ "$("$ENGINE" inspect -f '{{.State.Running}}' "$app")" = true ] || { "$ENGINE" logs "$app" | tail -20; fail "the app exited"; }
  sleep 1
done
[ -n "$up" ] || { "$ENGINE" logs "$app" | tail -20; "$ENGINE" logs "$sidecar" | tail -20; fail "the app never answered 200"; }

first=$(curl -si -H 'X-API-Key: demo' "http://127.0.0.1:$HPORT/api/hello" | tr -d '\r')
echo "$first" | grep -q '^HTTP/1.1 200' || fail "first request: $(echo "$first" | head -1)"
echo "$first" | grep -qi '^ratelimit: "default";r=9;t=' || fail "no RateLimit field from cellgate: $first"
# The bucket refills 1 a second while the requests are sent: 9 more 200s, then a 429 within 20 more.
codes=$(for _ in $(seq 2 10); do curl -s -o /dev/null -w '%{http_code} ' -H 'X-API-Key: demo' "http://127.0.0.1:$HPORT/api/hello"; done)
[ "$codes" = "200 200 200 200 200 200 200 200 200 " ] || fail "requests 2-10 answered: $codes"
refused=
for i in $(seq 11 30); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'X-API-Key: demo' "http://127.0.0.1:$HPORT/api/hello")
  [ "$code" = 429 ] && { refused=$i; break; }
done
[ -n "$refused" ] || fail "no 429 within 30 requests"
echo "OK: the app image served GET /api/hello through cellgate: 200 with RateLimit r=9, 200 up to the limit, 429 at request $refused"
