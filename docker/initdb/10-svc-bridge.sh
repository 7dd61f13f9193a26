#!/bin/sh
# First start of the compose stack's PostgreSQL: install the bridge into the default database with the
# migrations (the bridge language named by SVC_BRIDGE, else the installer's choice) and point it at the
# engine named by SVC_ENGINE_URL (and SVC_ENGINE_OPS_URL, the operations API, when it has its own
# listener): the foreign server svc_engine, the one place that holds the address (docs/sql.md §2).
# Skipped when SVC_INSTALL_BRIDGE is not "true" (the tests install it themselves).
set -eu
[ "${SVC_INSTALL_BRIDGE:-false}" = "true" ] || exit 0
for file in /svc-sql/migrations/*.sql; do
  PGOPTIONS="-c svc.bridge=${SVC_BRIDGE:-}" psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -f "$file"
done
# The dblink bridge's server names a PostgreSQL wire endpoint and needs credentials: its DBA creates it.
[ "${SVC_BRIDGE:-}" = "dblink" ] && exit 0
psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" \
  -v url="${SVC_ENGINE_URL:-http://engine:8080}" -v ops_url="${SVC_ENGINE_OPS_URL:-${SVC_ENGINE_URL:-http://engine:8080}}" <<'SQL'
CREATE SERVER svc_engine FOREIGN DATA WRAPPER svc_bridge_fdw OPTIONS (url :'url', ops_url :'ops_url');
SQL
