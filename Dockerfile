# cellgate as a container image (docs/deploy.md: building, tagging, pushing, Kubernetes): multi-stage
# build on Node 24 (LTS), non-root, VOLUME /data, PING health check, node as PID 1 so SIGTERM reaches
# the server (exec-form ENTRYPOINT, no shell in between). The build context is chosen by .dockerignore;
# test/build/dockerfiles.test.ts fails when a file copied here, or read by the build, is left out.
#
#   docker build -t cellgate .
#   docker run -d -p 6379:6379 -e CELLGATE_REQUIREPASS=s3cret -v cellgate-data:/data cellgate
#   docker run ... cellgate --maxmemory 100mb        # arguments are cellgate flags
#   docker run ... -e CELLGATE_APPENDONLY=yes cellgate  # the journal (docs/journal-format.md), in /data/appendonlydir
#   docker run --read-only --user 65534 -e RUNTIME_ROOT=... --entrypoint /bin/ratelimit cellgate
#                                                    # envoyproxy/ratelimit's environment (docs/envoy.md)
#
# Configuration precedence is config file < CELLGATE_* variables < flags (a flag always wins), and this
# image sets CELLGATE_BIND, CELLGATE_PROTECTED_MODE and CELLGATE_DIR: change those three with `-e` or a
# flag (`docker run cellgate --protected-mode no`), not in a config file (the variables override it).
# The health check speaks TCP to 127.0.0.1 on CELLGATE_PORT: keep a TCP port when adding a unixsocket.

# ---- build: compile TypeScript with the dev dependencies -------------------------------------------
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` (tsc) needs the sources, which come in the next layer; keeping them apart
# lets Docker reuse the node_modules layer when only src/ changes.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY scripts/embed-lua.mjs ./scripts/
COPY src ./src
RUN npm run build && npm prune --omit=dev --no-audit --no-fund

# ---- runtime: node, dist/, package.json and the runtime dependencies (ioredis for `backend`; grpc-js, proto-loader, yaml for rls-port)
FROM node:24-bookworm-slim
# Listen on every interface so other containers can connect (IPv6 too where the network has it: the
# leading '-' makes that address optional), but stay protected: clients from outside the container
# get -DENIED until CELLGATE_REQUIREPASS is set or CELLGATE_PROTECTED_MODE=no is given explicitly.
# MALLOC_MMAP_THRESHOLD_: glibc gives freed big blocks back (the keyspace's arrays double as it
# grows), see the top of src/main.ts and bench/node-flags.mjs.
ENV NODE_ENV=production \
    MALLOC_MMAP_THRESHOLD_=131072 \
    CELLGATE_BIND="0.0.0.0 -::" \
    CELLGATE_PROTECTED_MODE=yes \
    CELLGATE_DIR=/data
WORKDIR /app
COPY --from=build /src/package.json ./
COPY --from=build /src/dist ./dist
COPY --from=build /src/node_modules ./node_modules
# The gRPC rate limit service's message definitions (rls-port; docs/envoy.md), read at start.
COPY proto ./proto
COPY docker/healthcheck.mjs ./healthcheck.mjs
# envoyproxy/ratelimit's entry point: Envoy Gateway's rate limit Deployment runs `/bin/ratelimit` with
# its environment (docs/envoy.md, "Envoy Gateway"); this one starts `cellgate-server ratelimit`.
COPY docker/ratelimit /bin/ratelimit
RUN mkdir -p /data && chown node:node /data && chmod 755 /bin/ratelimit
USER node
WORKDIR /data
VOLUME /data
# 6379: RESP. 9121: the metrics port (/metrics, /healthz, /readyz), off until it is turned on, e.g.
# `-e CELLGATE_METRICS_PORT=9121 -e CELLGATE_METRICS_BIND=0.0.0.0` (it has no password: publish it
# only to the scraper; examples/kubernetes probes it).
EXPOSE 6379 9121
# PING over RESP from inside the container (loopback, so protected mode does not apply); AUTHs with
# CELLGATE_REQUIREPASS when it is set.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["node", "/app/healthcheck.mjs"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "--max-semi-space-size=8", "--single-threaded-gc", "/app/dist/main.js"]
CMD []
