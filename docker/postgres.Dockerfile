# PostgreSQL 15 with both bridge languages: PL/Python (Debian package), the http extension (pgsql-http,
# from the PostgreSQL project's apt repository the base image already uses) and plv8 built from source
# (plv8 builds its own V8; expect a long build). The svc_bridge extension files are installed too, so
# both `CREATE EXTENSION svc_bridge` and the migrations in sql/ work.
# Build from the repository root:
#   docker build -f docker/postgres.Dockerfile --build-arg PLV8_GIT=<plv8 git URL> -t svc-postgres .
# The stage `bridge-base` (no plv8, quick to build) is what the integration tests' harness starts.
FROM postgres:15-bookworm AS bridge-base
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends postgresql-plpython3-15 postgresql-15-http python3; \
    rm -rf /var/lib/apt/lists/*
COPY sql/extension/ /usr/share/postgresql/15/extension/
COPY sql/ /svc-sql/
COPY docker/initdb/ /docker-entrypoint-initdb.d/

FROM bridge-base
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
