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
files=(packages/*/test/*.test.ts test/*.test.ts)
# Sandboxes are heavy on 2 cores: test files run one at a time. A file that hangs fails after
# 10 minutes (the longest takes about two) instead of holding CI until its limit. Under tini
# as a subreaper: the sandboxes' processes, orphaned by `runsc create`, are reaped at once (not
# by whatever PID 1 is), so `runsc delete` does not wait 1-2 s for each.
exec tini -s -- node --import tsx --test --test-concurrency=1 --test-timeout=600000 --test-reporter=spec "${files[@]}" "$@"
