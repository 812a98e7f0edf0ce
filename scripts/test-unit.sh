#!/usr/bin/env bash
# The fast tier (`npm run test:unit`): the packages' own tests, no runsc sandbox, no server,
# no root needed beyond what a developer's checkout has. Under a minute on 2 cores.
# The full suite (`npm test`) runs these too, then everything against real sandboxes.
set -euo pipefail
cd "$(dirname "$0")/.."
# What the tests start (servers on the sim driver, the CLI, the gateway) runs from the build:
# its TypeScript brought up to date here (incremental: under a second when nothing changed);
# the native parts and the dashboard are `npm run build`'s.
npx tsc -b packages/protocol packages/edge packages/code-interpreter packages/server packages/gateway packages/cli
source scripts/test-tiers.sh
shopt -s nullglob
files=()
for f in packages/*/test/*.test.ts; do
  full_suite_only "$f" || files+=("$f")
done
exec node --import tsx --test --test-concurrency=4 "${files[@]}" "$@"
