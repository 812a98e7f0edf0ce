#!/usr/bin/env bash
# Every deployment path this machine can run, end to end (minutes; `npm test` runs only the
# fast part, test/deploy.test.ts):
#   1. fast checks: units verified, install script, kustomize render + schema validation, compose
#      file, Containerfile (test/deploy.test.ts)
#   2. install.sh into a scratch prefix with a real system user; the installed aenv-server run
#      with exactly the unit's capability bounding set and no_new_privs (setpriv, as systemd
#      would); the e2b SDK creates, pauses and resumes a sandbox; SIGTERM stops it; uninstall
#   3. the OCI image built by buildah (deploy/docker/build.sh), run with podman --privileged:
#      /health, the SDK's create/pause/resume, /metrics, and the `drain` preStop command
#   4. the compose stack (podman-compose): Redis, two nodes, a gateway; the SDK through the
#      gateway creates, pauses and resumes, then the sandbox's node is stopped (drain) and the
#      sandbox resumes on the other node
# Needs root, Debian packages buildah podman podman-compose (installed here if missing) and the
# `base` template (built if missing). Without a reachable registry, the Containerfile's base
# image is made locally by deploy/docker/local-base.sh (debootstrap) and the build does not
# pull (AENV_IMAGE_PULL=never, the default here).
#   sudo bash scripts/test-deploy.sh [fast|install|image|compose]...   (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ "$(id -u)" = 0 ] || { echo "test-deploy: must run as root" >&2; exit 1; }
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(fast install image compose)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }

templates=${AENV_TEST_TEMPLATES_DIR:-/var/lib/aenv/templates}
image=${AENV_TEST_IMAGE:-localhost/aenv:test}
key=test-deploy-key-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
port_install=${AENV_TEST_PORT_INSTALL:-18100}
port_image=${AENV_TEST_PORT_IMAGE:-18300}
port_gateway=${AENV_TEST_PORT_GATEWAY:-18380}
work=$(mktemp -d /var/tmp/aenv-test-deploy.XXXXXX)
passed=0 failed=0
say() { echo "test-deploy: $*"; }
result() { # NAME STATUS
  if [ "$2" = 0 ]; then say "PASS $1"; passed=$((passed + 1)); else say "FAIL $1"; failed=$((failed + 1)); fi
}
smoke() { node --import tsx test/deploy/smoke.ts "$@"; }
wait_health() { # URL SECONDS
  for _ in $(seq "$2"); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/health")" = 204 ] && return 0
    sleep 1
  done
  return 1
}
check_metrics() { # URL: the Prometheus text, without a key, has aenv_ metrics
  local text
  text=$(curl -sf "$1/metrics") && grep -c '^# TYPE aenv_' <<<"$text" | sed 's/^/  aenv_ metrics: /' &&
    grep -q '^# TYPE aenv_proxy_requests_total counter' <<<"$text"
}

# Podman on Debian 12: netavark (container DNS for compose) and runc (crun refuses hybrid
# cgroup hosts); buildah runs RUN steps in a chroot for the same reason. A private
# containers.conf keeps the host's own configuration untouched.
cat >"$work/containers.conf" <<'EOF'
[network]
network_backend = "netavark"
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF=${CONTAINERS_CONF:-$work/containers.conf}
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
export AENV_IMAGE_PULL=${AENV_IMAGE_PULL:-never}
# Some hosts (this one) cannot raise rlimits past the caller's (no CAP_SYS_RESOURCE), and
# podman's defaults for privileged containers are higher.
ulimits=(--ulimit nofile=16384:16384 --ulimit nproc=16384:16384)

server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  podman rm -f -t 60 aenv-test-deploy-node >/dev/null 2>&1
  if [ -f "$work/override.yaml" ]; then
    AENV_API_KEY=x podman-compose -p aenvtestdeploy -f deploy/compose/compose.yaml -f "$work/override.yaml" \
      down -v -t 120 >/dev/null 2>&1
    podman network rm -f aenvtestdeploy_default >/dev/null 2>&1
  fi
  [ -f "$work/install/opt/aenv/install.env" ] &&
    bash scripts/install.sh --uninstall --purge --prefix "$work/install/opt/aenv" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

need=()
for p in buildah podman podman-compose netavark aardvark-dns runc; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ] && { want image || want compose; }; then
  say "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ -d node_modules/e2b ] || npm ci --no-audit --no-fund
npm run build --silent
bash scripts/build-base-template.sh "$templates" >/dev/null

if want fast; then
  say "== fast checks (test/deploy.test.ts)"
  node --import tsx --test --test-reporter=dot test/deploy.test.ts
  result "fast checks" $?
fi

if want install; then
  say "== install.sh into $work/install, the installed server under the unit's capabilities"
  s=$work/install
  (
    set -e
    bash scripts/install.sh --prefix "$s/opt/aenv" --sysconfdir "$s/etc/aenv" --unitdir "$s/units" \
      --data-dir "$s/data" --user aenvtestgw --no-deps --templates-from "$templates" | sed 's/^/  /'
    id aenvtestgw >/dev/null
    grep -q '^User=aenvtestgw$' "$s/units/aenv-gateway.service"
  )
  result "install.sh" $?

  caps=$(sed -n 's/^CapabilityBoundingSet=//p' "$s/units/aenv-server.service" | tr 'A-Z ' 'a-z,' | sed 's/cap_/+/g')
  say "bounding set: $caps"
  (
    set -a
    . "$s/etc/aenv/aenv.env"
    set +a
    export AENV_CONFIG_PATH=$s/etc/aenv/config.toml AENV_LISTEN=127.0.0.1:$port_install \
      AENV_NET_PREFIX=aeda AENV_SLOT_CIDR=10.231.0.0/16 AENV_WARM_SLOTS=1
    exec setpriv --bounding-set "-all,$caps" --inh-caps -all --no-new-privs "$s/opt/aenv/bin/aenv-server"
  ) >"$work/server.log" 2>&1 &
  server_pid=$!
  ikey=$(sed -n 's/^AENV_API_KEY=//p' "$s/etc/aenv/aenv.env")
  if wait_health "http://127.0.0.1:$port_install" 90; then
    grep -E '^Cap(Bnd)|^NoNewPrivs' "/proc/$server_pid/status" | sed 's/^/  /'
    smoke "http://127.0.0.1:$port_install" "$ikey"
    result "installed server: SDK create/pause/resume with the unit's capabilities" $?
  else
    tail -5 "$work/server.log"
    result "installed server: /health" 1
  fi
  kill -TERM "$server_pid"
  wait "$server_pid"
  rc=$?
  server_pid=""
  result "installed server: SIGTERM stops it cleanly (exit $rc)" "$rc"
  bash scripts/install.sh --uninstall --prefix "$s/opt/aenv" | sed 's/^/  /'
  ! id aenvtestgw >/dev/null 2>&1 && [ ! -e "$s/opt/aenv" ] && [ -d "$s/data" ]
  result "install.sh --uninstall (user and prefix gone, data kept)" $?
fi

if want image; then
  say "== image: buildah build, podman run --privileged"
  if [ "$AENV_IMAGE_PULL" = never ]; then bash deploy/docker/local-base.sh; fi
  start=$(date +%s)
  bash deploy/docker/build.sh "$image" 2>&1 | grep -E '^(STEP|build:|install:)|runsc version|^v[0-9]|Error' | sed 's/^/  /'
  result "image built ($(($(date +%s) - start)) s)" "${PIPESTATUS[0]}"
  mkdir -p "$work/image-data"
  podman run -d --name aenv-test-deploy-node --privileged "${ulimits[@]}" -p "127.0.0.1:$port_image:8000" \
    -v "$work/image-data:/var/lib/aenv" -v "$templates:/templates" -e AENV_TEMPLATES_DIR=/templates \
    -e AENV_API_KEY="$key" -e AENV_NET_PREFIX=aedc -e AENV_SLOT_CIDR=10.233.0.0/16 -e AENV_WARM_SLOTS=1 \
    "$image" >/dev/null
  if wait_health "http://127.0.0.1:$port_image" 90; then
    result "image: /health 204" 0
    smoke "http://127.0.0.1:$port_image" "$key"
    result "image: SDK create/pause/resume" $?
    check_metrics "http://127.0.0.1:$port_image"
    result "image: /metrics" $?
    podman exec aenv-test-deploy-node /opt/aenv/bin/entrypoint drain
    sleep 2
    [ "$(podman inspect -f '{{.State.Running}}' aenv-test-deploy-node)" = false ]
    result "image: entrypoint drain stops the server (exit $(podman inspect -f '{{.State.ExitCode}}' aenv-test-deploy-node))" $?
  else
    podman logs aenv-test-deploy-node 2>&1 | tail -5
    result "image: /health" 1
  fi
  podman rm -f aenv-test-deploy-node >/dev/null
fi

if want compose; then
  say "== compose: podman-compose up, the SDK through the gateway"
  cat >"$work/override.yaml" <<EOF
services:
  node-a:
    environment: {AENV_NET_PREFIX: aedd, AENV_SLOT_CIDR: 10.234.0.0/16, AENV_WARM_SLOTS: "1"}
    ulimits: {nofile: {soft: 16384, hard: 16384}, nproc: {soft: 16384, hard: 16384}}
  node-b:
    environment: {AENV_NET_PREFIX: aede, AENV_SLOT_CIDR: 10.235.0.0/16, AENV_WARM_SLOTS: "1"}
    ulimits: {nofile: {soft: 16384, hard: 16384}, nproc: {soft: 16384, hard: 16384}}
  redis:
    ulimits: {nofile: {soft: 16384, hard: 16384}, nproc: {soft: 16384, hard: 16384}}
  gateway:
    ulimits: {nofile: {soft: 16384, hard: 16384}, nproc: {soft: 16384, hard: 16384}}
EOF
  podman image exists "$image" || bash deploy/docker/build.sh "$image" >/dev/null
  export AENV_IMAGE=$image AENV_REDIS_IMAGE=$image AENV_API_KEY=$key AENV_GATEWAY_PORT=$port_gateway \
    AENV_TEMPLATES=$templates
  podman-compose -p aenvtestdeploy -f deploy/compose/compose.yaml -f "$work/override.yaml" up -d >"$work/compose.log" 2>&1
  result "compose up" $?
  gw=http://127.0.0.1:$port_gateway
  ready=0
  for _ in $(seq 90); do
    ready=$(curl -s -H "x-api-key: $key" "$gw/nodes" | grep -o '"status":"ready"' | wc -l)
    [ "$ready" = 2 ] && break
    sleep 1
  done
  [ "$ready" = 2 ]
  result "compose: gateway lists 2 ready nodes" $?
  smoke "$gw" "$key" --drain-cmd "podman stop -t 300 aenvtestdeploy_{node}_1 >/dev/null"
  result "compose: SDK through the gateway: create/pause/resume, drain, resume on the other node" $?
  check_metrics "$gw"
  result "compose: gateway /metrics" $?
  podman-compose -p aenvtestdeploy -f deploy/compose/compose.yaml -f "$work/override.yaml" down -v -t 120 \
    >>"$work/compose.log" 2>&1
  podman network rm -f aenvtestdeploy_default >/dev/null 2>&1
  rm -f "$work/override.yaml"
fi

echo "${passed} passed, ${failed} failed"
[ "$failed" = 0 ]
