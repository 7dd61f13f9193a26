# The engine image (it also runs the reference hub and the compose stack's helper scripts). Two stages:
# the build stage compiles the workspace and runs docker/assemble.sh, the same script CI runs, to put the
# runtime tree (only the engine's production dependencies) in /out; the runtime stage copies that tree
# and runs as the unprivileged user `node`. Nothing is written outside /data, so the root filesystem can
# be mounted read-only. Build from the repository root:
#   docker build -f docker/engine.Dockerfile -t svc-engine .
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json tsconfig.base.json tsconfig.json ./
COPY engine/package.json engine/
COPY udf/package.json udf/
COPY integration-tests/package.json integration-tests/
COPY client/package.json client/
RUN npm ci --no-audit --no-fund
COPY engine engine
COPY docker/assemble.sh docker/
COPY docker/scripts docker/scripts
RUN npx tsc -b engine && docker/assemble.sh /out

FROM ${NODE_IMAGE}
ENV NODE_ENV=production \
    SVC_HOST=0.0.0.0 \
    SVC_PORT=8080 \
    SVC_DATA_DIR=/data
WORKDIR /app
COPY --from=build /out /app
# /data is the engine's one writable place. /secrets and /hub-data are there for the compose stack: a
# named volume mounted on a directory of the image starts with its owner, so the unprivileged user can
# write the generated secrets and the reference hub's state.
RUN mkdir -p /data /secrets /hub-data && chown node:node /data /secrets /hub-data && chmod 0700 /data /secrets /hub-data
USER node
VOLUME /data
# 8080: execution API. 8081: operations API, which binds to loopback unless SVC_OPS_HOST says otherwise.
EXPOSE 8080 8081
# Readiness, not liveness: /api/health/ready answers 503 until policies and keys are loaded.
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "scripts/probe.mjs", "/api/health/ready"]
STOPSIGNAL SIGTERM
CMD ["node", "engine/dist/main.js"]
