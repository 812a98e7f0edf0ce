#!/usr/bin/env bash
# One command from a fresh Debian 12 host to a running aenv-server with the `base` template:
# installs system packages and node modules, builds, builds the template, starts the server.
#   sudo bash scripts/setup.sh [--listen HOST:PORT] [--data-dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
data_dir=/var/lib/aenv
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = "--data-dir" ] && data_dir=${args[$((i + 1))]}
done
command -v node >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm; }
bash scripts/install-deps.sh
[ -d node_modules/e2b ] || npm ci --no-audit --no-fund
npm run build --silent
bash scripts/build-base-template.sh "$data_dir/templates"
echo "setup: starting aenv-server (API key in $data_dir/secrets/api-key unless AENV_API_KEY is set)"
exec node packages/server/bin/aenv-server.js --data-dir "$data_dir" "$@"
