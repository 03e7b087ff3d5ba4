#!/bin/bash
# ratelimit-image-check.sh — runs the cellgate image as Envoy Gateway's rate limit Deployment runs it
# (docs/envoy.md, "Envoy Gateway"): `/bin/ratelimit` with no arguments, Envoy Gateway's environment
# exactly as written (test/fixtures/envoy-gateway/ratelimit-deployment.yaml, from its source), as uid
# 65534 on a read-only root filesystem with no capabilities, the certificates mounted read-only at
# /certs. The configuration is pushed over xDS (CONFIG_TYPE=GRPC_XDS_SOTW) by scripts/xds-serve.mjs on
# the host, over mutual TLS: the container must present /certs/tls.crt as its client certificate and
# trust the server's through /certs/ca.crt. Checks from the host: /healthcheck on 8080 answers 200 OK,
# the container ACKed the pushed version, /rlconfig prints the pushed limits, gRPC over TLS on 8081
# decides them (OK, OK, OVER_LIMIT, counted in the host's redis-server), the metrics answer on
# PROMETHEUS_ADDR (19001), nothing was written, and SIGTERM ends it with 0.
#
#   bash scripts/ratelimit-image-check.sh      # needs podman (or docker: ENGINE=docker), openssl, redis-server, curl, node
#   CONFIG=file bash scripts/ratelimit-image-check.sh   # CONFIG_TYPE=FILE, the limits mounted instead
#
# What differs from Envoy Gateway's environment: the addresses only. REDIS_URL is the host's
# redis-server and CONFIG_GRPC_XDS_SERVER_URL the host's xds-serve.mjs, both at HOSTADDR (10.0.2.2:
# podman's slirp4netns reaches the host's loopback there), whose certificate names that address. With
# CONFIG=file, CONFIG_TYPE=FILE and the limits mounted at /data/ratelimit/config
# (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config). Env: ENGINE (podman), IMAGE (localhost/cellgate:check),
# SKIP_BUILD=1 (use IMAGE as it is), HPORT (first of five host ports, 18090), HOSTADDR, CONFIG (xds).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ENGINE=${ENGINE:-podman}
IMAGE=${IMAGE:-localhost/cellgate:check}
HPORT=${HPORT:-18090}
RPORT=$((HPORT + 3))
XPORT=$((HPORT + 4))
HOSTADDR=${HOSTADDR:-10.0.2.2}
CONFIG=${CONFIG:-xds}
[ "$CONFIG" = xds ] || [ "$CONFIG" = file ] || { echo "FAIL: CONFIG is xds or file, not '$CONFIG'"; exit 1; }
fail() { echo "FAIL: $*"; exit 1; }
for tool in "$ENGINE" openssl redis-server curl node; do command -v "$tool" >/dev/null || fail "$tool is not installed"; done

if [ -z "${SKIP_BUILD:-}" ]; then
  fmt=(); [ "$ENGINE" = podman ] && fmt=(--format docker)
  "$ENGINE" build "${fmt[@]}" -f "$ROOT/Dockerfile" -t "$IMAGE" "$ROOT"
fi

work=$(mktemp -d)
cid=
# Named, so that a container the engine created but could not start is removed too.
name=cellgate-ratelimit-check-$$
cleanup() {
  "$ENGINE" rm -f -t 5 "$name" >/dev/null 2>&1 || true
  if [ -f "$work/xds.pid" ]; then kill "$(cat "$work/xds.pid")" 2>/dev/null || true; fi
  if [ -f "$work/redis.pid" ]; then
    pid=$(cat "$work/redis.pid"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$work" || true
}
trap cleanup EXIT

# The Secret Envoy Gateway mounts at /certs (tls.crt, tls.key, ca.crt), readable by uid 65534.
mkdir -p "$work/certs" "$work/config"
(cd "$work/certs" \
  && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=envoy-gateway-ca 2>/dev/null \
  && openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj /CN=envoy-ratelimit 2>/dev/null \
  && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > tls.ext \
  && openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt -days 2 -extfile tls.ext 2>/dev/null \
  && chmod 644 tls.key && chmod 755 .)
# The xDS server's own certificate (Envoy Gateway's, from the same CA), kept on the host: it names the
# address the container dials, which the client checks as envoyproxy/ratelimit's does.
mkdir -p "$work/xds"
(cd "$work/xds" \
  && openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=envoy-gateway 2>/dev/null \
  && printf 'subjectAltName=IP:%s,IP:127.0.0.1,DNS:localhost\n' "$HOSTADDR" > server.ext \
  && openssl x509 -req -in server.csr -CA ../certs/ca.crt -CAkey ../certs/ca.key -CAcreateserial -out server.crt -days 2 -extfile server.ext 2>/dev/null)
chmod 755 "$work" "$work/config"
printf 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n' > "$work/config/edge.yaml"
chmod 644 "$work/config/edge.yaml"

redis-server --port "$RPORT" --bind 127.0.0.1 --protected-mode no --save '' --appendonly no \
  --daemonize yes --pidfile "$work/redis.pid" --logfile "$work/redis.log" --dir "$work"
for _ in $(seq 1 50); do [ -f "$work/redis.pid" ] && break; sleep 0.1; done

if [ "$CONFIG" = xds ]; then
  # Mutual TLS: the client certificate is required, signed by the CA of /certs.
  node "$ROOT/scripts/xds-serve.mjs" --bind 127.0.0.1 --port "$XPORT" --version v1 --cert "$work/xds/server.crt" \
    --key "$work/xds/server.key" --ca "$work/certs/ca.crt" "$work/config/edge.yaml" > "$work/xds.log" 2>&1 &
  echo $! > "$work/xds.pid"
  for _ in $(seq 1 100); do grep -q '^listening on' "$work/xds.log" && break; sleep 0.1; done
  grep -q '^listening on' "$work/xds.log" || { cat "$work/xds.log"; fail "xds-serve.mjs did not start"; }
  over="{ REDIS_URL: '$HOSTADDR:$RPORT', CONFIG_GRPC_XDS_SERVER_URL: '$HOSTADDR:$XPORT' }"
  mounts=()
else
  over="{ CONFIG_TYPE: 'FILE', REDIS_URL: '$HOSTADDR:$RPORT' }"
  mounts=(-v "$work/config:/data/ratelimit/config:ro")
fi

# Envoy Gateway's environment, with the addresses of the host's servers.
mapfile -t envargs < <(cd "$ROOT" && node --input-type=module -e "
import { readFileSync } from 'node:fs'; import { parse } from 'yaml';
const d = parse(readFileSync('test/fixtures/envoy-gateway/ratelimit-deployment.yaml', 'utf8'));
const over = $over;
for (const e of d.env) console.log('--env=' + e.name + '=' + (over[e.name] ?? e.value));")
net=(); [ "$ENGINE" = podman ] && net=(--network slirp4netns:allow_host_loopback=true)
cid=$("$ENGINE" run -d --name "$name" --user 65534:65534 --read-only --cap-drop ALL --security-opt no-new-privileges "${net[@]}" \
  -p "127.0.0.1:$HPORT:8080" -p "127.0.0.1:$((HPORT + 1)):8081" -p "127.0.0.1:$((HPORT + 2)):19001" \
  -v "$work/certs:/certs:ro" "${mounts[@]}" "${envargs[@]}" \
  --entrypoint /bin/ratelimit "$IMAGE" 2> >(grep -v 'systemd connection' >&2))

status=
for _ in $(seq 1 120); do
  status=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "127.0.0.1:$HPORT/healthcheck" || true)
  [ "$status" = 200 ] && break
  [ "$("$ENGINE" inspect -f '{{.State.Running}}' "$cid")" = true ] || { "$ENGINE" logs "$cid" 2>&1 | tail -20; fail "the container exited"; }
  sleep 1
done
[ "$status" = 200 ] || { "$ENGINE" logs "$cid" 2>&1 | tail -20; fail "/healthcheck never answered 200 (last: $status)"; }
[ "$(curl -s "127.0.0.1:$HPORT/healthcheck")" = OK ] || fail "/healthcheck's body is not OK"
[ "$("$ENGINE" exec "$cid" id -u)" = 65534 ] || fail "not running as uid 65534"
if [ "$CONFIG" = xds ]; then
  # FORCE_START_WITHOUT_INITIAL_CONFIG: healthy may come before the push; the ACK says it is in force.
  for _ in $(seq 1 60); do grep -q '^ACK v1 nonce=n1 node=envoy-ratelimit$' "$work/xds.log" && break; sleep 0.5; done
  grep -q '^ACK v1 nonce=n1 node=envoy-ratelimit$' "$work/xds.log" || { cat "$work/xds.log"; "$ENGINE" logs "$cid" 2>&1 | tail -20; fail "no ACK of the pushed version from node envoy-ratelimit"; }
  ! grep -q '^NACK' "$work/xds.log" || { cat "$work/xds.log"; fail "the pushed configuration was NACKed"; }
fi
rlconfig=$(curl -s "127.0.0.1:$HPORT/rlconfig")
[ "$rlconfig" = 'edge.remote_address: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false' ] || fail "/rlconfig does not print the $CONFIG limits: '$rlconfig'"
codes=$(cd "$ROOT" && node --input-type=module -e "
import * as grpc from '@grpc/grpc-js'; import * as protoLoader from '@grpc/proto-loader'; import { readFileSync } from 'node:fs';
const def = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto'], { includeDirs: ['proto'], keepCase: true, longs: Number, enums: String, defaults: true });
const C = grpc.loadPackageDefinition(def).envoy.service.ratelimit.v3.RateLimitService;
const c = new C('127.0.0.1:$((HPORT + 1))', grpc.credentials.createSsl(readFileSync('$work/certs/ca.crt')));
const out = [];
for (let i = 0; i < 3; i++) out.push((await new Promise((ok, ko) => c.ShouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value: '10.1.1.1' }] }] }, { deadline: Date.now() + 10000 }, (e, r) => (e ? ko(e) : ok(r))))).overall_code);
c.close(); console.log(out.join(' '));" 2>/dev/null)
[ "$codes" = "OK OK OVER_LIMIT" ] || fail "gRPC over TLS answered '$codes', expected OK OK OVER_LIMIT"
[ -n "$(redis-cli -p "$RPORT" --raw keys 'cellgate:edge_remote_address_10.1.1.1_*')" ] || fail "no count in Redis"
# (Read whole before grep: grep -q would close the pipe early, and pipefail would count curl's SIGPIPE.)
metrics=$(curl -s "127.0.0.1:$((HPORT + 2))/metrics")
grep -q '^ratelimit_service_rate_limit_over_limit{domain="edge",key1="remote_address"} 1$' <<<"$metrics" || fail "no metrics on PROMETHEUS_ADDR"
logs=$("$ENGINE" logs "$cid" 2>&1)
grep -q 'no counterpart in cellgate, ignored: PROMETHEUS_MAPPER_YAML' <<<"$logs" || fail "the one line naming the ignored variables is missing"
# The container's own changes: the engine's mount points only (/certs, /etc's resolv.conf and hosts).
changes=$("$ENGINE" diff "$cid" | grep -vE '^[AC] /(certs|etc|data|run)(/|$)' || true)
[ -z "$changes" ] || fail "files written: $changes"
"$ENGINE" stop -t 10 "$cid" >/dev/null
code=$("$ENGINE" inspect -f '{{.State.ExitCode}}' "$cid")
[ "$code" = 0 ] || { "$ENGINE" logs "$cid" 2>&1 | tail -5; fail "exit code $code after SIGTERM"; }
how="configuration over xDS (mutual TLS, version v1 ACKed)"; [ "$CONFIG" = file ] && how="CONFIG_TYPE=FILE, limits mounted"
echo "OK: /bin/ratelimit as Envoy Gateway runs it (uid 65534, read-only root, $how): /healthcheck 200, /rlconfig, gRPC over TLS decided in Redis ($codes), metrics on 19001, nothing written, exit 0 on SIGTERM"
