# PostgreSQL 15 with the svc bridge, one build target per bridge language:
#   plpython3u (the default, last stage): PL/Python from the Debian package, quick to build
#   plv8: plv8 built from source (it builds its own V8; expect a long build), only when asked for
# Both have the http extension (pgsql-http, from the PostgreSQL project's apt repository the base image
# already uses) and the svc_bridge extension files, so `CREATE EXTENSION svc_bridge` and the migrations in
# sql/ both work. The dblink bridge needs nothing beyond the contrib modules every image has.
# Build from the repository root:
#   docker build -f docker/postgres.Dockerfile -t svc-postgres .
#   docker build -f docker/postgres.Dockerfile --target plv8 --build-arg PLV8_GIT=<plv8 git URL> -t svc-postgres-plv8 .
# The stage `bridge-base` is what the integration tests' harness starts.
FROM postgres:15-bookworm AS bridge-base
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends postgresql-plpython3-15 postgresql-15-http python3; \
    rm -rf /var/lib/apt/lists/*
COPY sql/extension/ /usr/share/postgresql/15/extension/
COPY sql/ /svc-sql/
COPY docker/initdb/ /docker-entrypoint-initdb.d/

FROM bridge-base AS plv8
ARG PLV8_GIT
ARG PLV8_REF=v3.2.3
RUN test -n "$PLV8_GIT" || { echo 'pass --build-arg PLV8_GIT=<URL of the plv8 git repository>' >&2; exit 1; }
RUN set -eux; \
    apt-get update; \
    build_deps='build-essential git ca-certificates cmake ninja-build pkg-config python3-dev libc++-dev libc++abi-dev libtinfo-dev postgresql-server-dev-15'; \
    apt-get install -y --no-install-recommends $build_deps; \
    git clone --depth 1 --branch "$PLV8_REF" "$PLV8_GIT" /tmp/plv8; \
    make -C /tmp/plv8; \
    make -C /tmp/plv8 install; \
    rm -rf /tmp/plv8; \
    apt-get purge -y --auto-remove $build_deps; \
    rm -rf /var/lib/apt/lists/*

# The default target: BuildKit builds only the stages a target needs, so plv8 is never built for it.
FROM bridge-base AS plpython3u
