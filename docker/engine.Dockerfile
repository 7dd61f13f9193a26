# The engine image: builds the workspace, then runs `node engine/dist/main.js` as an unprivileged user.
# Build from the repository root: docker build -f docker/engine.Dockerfile -t svc-engine .
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json tsconfig.base.json tsconfig.json ./
COPY engine/package.json engine/
COPY udf/package.json udf/
COPY integration-tests/package.json integration-tests/
RUN npm ci --no-audit --no-fund
COPY engine engine
COPY udf udf
RUN npm run build && npm prune --omit=dev

FROM node:20-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production SVC_HOST=0.0.0.0 SVC_PORT=8080 SVC_DATA_DIR=/data
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules node_modules
COPY --from=build /app/engine/package.json engine/
COPY --from=build /app/engine/dist engine/dist
COPY --from=build /app/engine/drizzle engine/drizzle
RUN mkdir -p /data && chown node:node /data
USER node
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD node -e "fetch('http://127.0.0.1:'+process.env.SVC_PORT+'/api/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
CMD ["node", "engine/dist/main.js"]
