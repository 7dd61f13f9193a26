#!/bin/sh
# First start of the compose stack's PostgreSQL: install the bridge into the default database with the
# migrations (the bridge language named by SVC_BRIDGE, else the installer's choice) and point it at the
# engine named by SVC_ENGINE_URL. Skipped when SVC_INSTALL_BRIDGE is not "true" (the tests install it themselves).
set -eu
[ "${SVC_INSTALL_BRIDGE:-false}" = "true" ] || exit 0
for file in /svc-sql/migrations/*.sql; do
  PGOPTIONS="-c svc.bridge=${SVC_BRIDGE:-}" psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -f "$file"
done
psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" \
  -c "ALTER DATABASE \"$POSTGRES_DB\" SET svc.engine_url = '${SVC_ENGINE_URL:-http://engine:8080}'"
