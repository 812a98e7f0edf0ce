#!/usr/bin/env bash
# The test command (`npm test`): works on a clean clone as root. Installs system packages,
# node modules, builds, builds the base, code-interpreter and desktop templates once (cached), then runs every test
# against real runsc sandboxes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
if [ ! -d node_modules/e2b ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
npm run build --silent
bash scripts/build-base-template.sh "${AENV_TEST_TEMPLATES_DIR:-/var/lib/aenv/templates}"
bash scripts/build-code-interpreter-template.sh "${AENV_TEST_TEMPLATES_DIR:-/var/lib/aenv/templates}"
bash scripts/build-desktop-template.sh "${AENV_TEST_TEMPLATES_DIR:-/var/lib/aenv/templates}"
shopt -s nullglob
# The packages' own tests start no sandbox (the fast tier, scripts/test-unit.sh): three files at
# a time. The rest, and the package files the fast tier leaves to the full suite
# (scripts/test-tiers.sh), in two lanes of one file each (scripts/test-e2e.mjs: each lane its
# own network; files that share a fixed resource run in one lane, in order).
source scripts/test-tiers.sh
unit=()
e2e=()
for f in packages/*/test/*.test.ts; do
  if full_suite_only "$f"; then e2e+=("$f"); else unit+=("$f"); fi
done
e2e+=(test/*.test.ts)
# A file that hangs fails after 10 minutes (the longest takes about three) instead of holding
# CI until its limit. Under tini as a subreaper: the sandboxes' processes, orphaned by `runsc
# create`, are reaped at once (not by whatever PID 1 is), so `runsc delete` does not wait 1-2 s
# for each.
status=0
unit_log=$(mktemp /tmp/aenv-unit-log.XXXXXX)
unit_status=0
tini -s -- node --import tsx --test --test-timeout=600000 --test-reporter=spec --test-concurrency=3 \
  "${unit[@]}" "$@" 2>&1 | tee "$unit_log" || unit_status=$?
node scripts/test-e2e.mjs --lanes "${AENV_TEST_LANES:-2}" --test-timeout=600000 "$@" "${e2e[@]}" || status=$?
# The fast tier's failures again at the very end, where a reader of the log's tail sees them.
if [ "$unit_status" -ne 0 ]; then
  status=$unit_status
  printf '\n━━ the fast tier failed:\n'
  sed -n '/✖ failing tests:/,$p' "$unit_log" | head -80
fi
rm -f "$unit_log"
exit "$status"
