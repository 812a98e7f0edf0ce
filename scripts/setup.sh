#!/usr/bin/env bash
# One command from a fresh Debian 12 host to a running aenv-server with its default templates
# (`base`, `code-interpreter-v1`, `desktop`): installs system packages and node modules, builds,
# builds the templates, starts the server.
#   sudo bash scripts/setup.sh [--listen HOST:PORT] [--data-dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
data_dir=/var/lib/aenv
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = "--data-dir" ] && data_dir=${args[$((i + 1))]}
done
# Node.js >= 20.18 is required (the e2b SDK's floor too); Debian 12's own nodejs is 18.
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=18)?0:1)' 2>/dev/null; then
  echo "setup: Node.js >= 20.18 is required (found: $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi
bash scripts/install-deps.sh
[ -d node_modules/e2b ] || npm ci --no-audit --no-fund
npm run build --silent
bash scripts/build-base-template.sh "$data_dir/templates"
# The @e2b/code-interpreter SDK's default template: base plus Debian's Jupyter stack.
bash scripts/build-code-interpreter-template.sh "$data_dir/templates"
# The @e2b/desktop SDK's template: base plus Xvfb, Xfce, noVNC and Firefox.
bash scripts/build-desktop-template.sh "$data_dir/templates"
echo "setup: starting aenv-server (API key in $data_dir/secrets/api-key unless AENV_API_KEY is set)"
# tini as a subreaper reaps the sandboxes' processes at once (runsc's delete waits for that);
# systemd and the OCI image's tini do the same for installed servers.
exec tini -s -- node packages/server/bin/aenv-server.js --data-dir "$data_dir" "$@"
