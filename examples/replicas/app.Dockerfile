# The example application of examples/express, as an image: the application package `cellgate`
# (packages/cellgate, which the app imports as `cellgate/express`) built from this repository, with
# express and ioredis from the repository's dev dependencies. Built by docker-compose.yml next to
# this file, with the repository root as the context; the context's files are chosen by
# app.Dockerfile.dockerignore (BuildKit, the default builder), not by the root .dockerignore, which is
# the server image's.
FROM node:24-bookworm-slim
WORKDIR /app
# The workspace's manifest too: npm ci links node_modules/cellgate to packages/cellgate.
COPY package.json package-lock.json ./
COPY packages/cellgate/package.json ./packages/cellgate/
RUN npm ci --ignore-scripts --no-audit --no-fund
# What `npm run build:packages` reads: the package's tsconfig (extending the root one) and the
# client's and middleware's sources (test/build/dockerfiles.test.ts runs the build in exactly these files).
COPY tsconfig.json ./
COPY packages/cellgate/tsconfig.json ./packages/cellgate/
COPY src/client ./src/client
COPY src/http ./src/http
RUN npm run build:packages
COPY examples/express ./examples/express
USER node
ENV NODE_ENV=production
CMD ["node", "examples/express/server.mjs"]
