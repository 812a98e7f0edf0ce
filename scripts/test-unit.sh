#!/usr/bin/env bash
# The fast tier (`npm run test:unit`): the packages' own tests, no runsc sandbox, no server,
# no root needed beyond what a developer's checkout has. Under a minute on 2 cores.
# The full suite (`npm test`) runs these too, then everything against real sandboxes.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
files=()
for f in packages/*/test/*.test.ts; do
  case "$f" in
    # These start a local docker-registry or S3 server, or probe runsc: they belong to the full suite.
    */images-registry.test.ts | */images-estargz.test.ts | */probe-memo.test.ts | */repository-s3-backend.test.ts) ;;
    *) files+=("$f") ;;
  esac
done
exec node --import tsx --test --test-concurrency=4 "${files[@]}" "$@"
