# The example application of examples/express, as an image: cellgate's package built from this
# repository (the app imports `cellgate/express`), with express and ioredis from its dev dependencies.
# Built by docker-compose.yml next to this file, with the repository root as the context; the
# context's files are chosen by app.Dockerfile.dockerignore (BuildKit, the default builder), not by
# the root .dockerignore, which is the server image's.
FROM node:24-bookworm-slim
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
# What `npm run build` reads (as in the root Dockerfile's build stage; test/build/dockerfiles.test.ts
# runs the build in exactly these files).
COPY tsconfig.json ./
COPY scripts/embed-lua.mjs ./scripts/
COPY src ./src
RUN npm run build
COPY examples/express ./examples/express
USER node
ENV NODE_ENV=production
CMD ["node", "examples/express/server.mjs"]
