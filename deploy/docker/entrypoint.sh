#!/bin/sh
# Container entrypoint: `aenv-server [FLAGS]` (default), `aenv-gateway [FLAGS]`, `aenv ...`,
# or any other command. Before the first start of a node without a `base` template in its
# templates dir, the template is built (debootstrap from the Debian mirror; a few minutes)
# unless AENV_BUILD_BASE_TEMPLATE=0; mount a templates dir that has it to skip that.
# `drain` (a Kubernetes preStop hook) sends the running server SIGTERM -- a cluster node then
# drains, a single node stops its sandboxes -- and waits until it has exited.
set -e
app=/opt/aenv/app
# Called by name (the aenv-server, aenv-gateway, aenv links on PATH) or with the name first.
cmd=$(basename "$0")
if [ "$cmd" = entrypoint ]; then
  cmd=${1:-aenv-server}
  [ $# -gt 0 ] && shift
fi
placeholder_key() {
  case ${AENV_API_KEY:-} in
    REPLACE-ME*) echo "entrypoint: AENV_API_KEY is still the placeholder; set a real key (docs/deployment.md)" >&2; exit 2 ;;
  esac
  case ${AENV_REPOSITORY_KEY:-} in
    REPLACE-ME*) echo "entrypoint: AENV_REPOSITORY_KEY is still the placeholder; set a real key (docs/deployment.md)" >&2; exit 2 ;;
  esac
}
case $cmd in
  drain)
    pid=$(cat /run/aenv-server.pid 2>/dev/null) || { echo "drain: no aenv-server here"; exit 0; }
    kill -TERM "$pid" 2>/dev/null || exit 0
    while kill -0 "$pid" 2>/dev/null; do sleep 1; done
    echo "drain: aenv-server exited" ;;
  aenv-server)
    case ${1:-} in gc|import-template) exec node "$app/packages/server/bin/aenv-server.js" "$@" ;; esac
    placeholder_key
    tdir=${AENV_TEMPLATES_DIR:-${AENV_DATA_DIR:-/var/lib/aenv}/templates}
    if [ ! -f "$tdir/base/template.json" ] && [ "${AENV_BUILD_BASE_TEMPLATE:-1}" != 0 ]; then
      echo "entrypoint: no base template in $tdir: building it (set AENV_BUILD_BASE_TEMPLATE=0 to skip)"
      mkdir -p "$tdir"
      # Nodes sharing a templates volume build it once: the others wait on the lock, then
      # find it cached.
      # The tree is made in the container's own /var/tmp: volumes are often mounted nodev,
      # which debootstrap refuses.
      AENV_BASE_BUILD_DIR=/var/tmp flock "$tdir/.base.lock" bash "$app/scripts/build-base-template.sh" "$tdir"
    fi
    echo $$ >/run/aenv-server.pid
    exec node "$app/packages/server/bin/aenv-server.js" "$@" ;;
  aenv-gateway) placeholder_key; exec node "$app/packages/gateway/bin/aenv-gateway.js" "$@" ;;
  aenv) exec node "$app/packages/cli/bin/aenv.js" "$@" ;;
  *) exec "$cmd" "$@" ;;
esac
