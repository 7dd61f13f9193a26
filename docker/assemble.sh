#!/bin/sh
# Assembles the engine's runtime file tree into an empty directory: the built engine (engine/dist and
# its migrations), only the engine's production dependencies installed from package-lock.json (so nested
# versions such as engine/node_modules/pino stay where npm put them), and the helper
# scripts. The engine image runs exactly this script, and so does the test that starts the tree as a
# process, so what CI runs is what the image holds.
#   npm ci && npm run build && docker/assemble.sh <out-dir>
# Then: cd <out-dir> && SVC_DATA_DIR=<data> node engine/dist/main.js
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: docker/assemble.sh <out-dir>}

[ -f "$root/engine/dist/main.js" ] || { echo "assemble: engine/dist/main.js is missing; run npm run build first" >&2; exit 1; }
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then
  echo "assemble: $out is not empty" >&2
  exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

# npm ci checks the lock file against every workspace's package.json, so they come along for the
# install; --workspace engine installs the engine's dependencies only, --omit=dev none of the tools.
cp "$root/package.json" "$root/package-lock.json" "$out/"
workspaces=$(cd "$root" && node -p "require('./package.json').workspaces.join(' ')")
for ws in $workspaces; do
  mkdir -p "$out/$ws"
  cp "$root/$ws/package.json" "$out/$ws/"
done
(cd "$out" && npm ci --omit=dev --workspace engine --ignore-scripts --no-audit --no-fund --prefer-offline --loglevel=error)
for ws in $workspaces; do
  [ "$ws" = engine ] || rm -rf "${out:?}/$ws" "$out/node_modules/@svc/$(basename "$ws")"
done
rm -f "$out/package-lock.json"

# The build output without type declarations; source maps stay for readable stack traces.
mkdir -p "$out/engine/drizzle"
cp -R "$root/engine/dist" "$out/engine/dist"
find "$out/engine/dist" -name '*.d.ts' -delete
cp -R "$root/engine/drizzle/migrations" "$out/engine/drizzle/migrations"
cp -R "$root/docker/scripts" "$out/scripts"
echo "assemble: runtime tree in $out"
