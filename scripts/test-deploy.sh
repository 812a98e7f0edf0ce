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
#   5. the systemd units under a real systemd (PID 1 of a privileged container made from the
#      image plus Debian's systemd): Debian's redis-server.service, aenv-server.service as a
#      cluster node, aenv-gateway.service as user aenv; the SDK through the gateway; kill -9 of
#      the node (restarted, its running sandbox adopted); systemctl stop (drain)
# Needs root, Debian packages buildah podman podman-compose (installed here if missing) and the
# `base` template (built if missing). Without a reachable registry, the Containerfile's base
# image is made locally by deploy/docker/local-base.sh (debootstrap) and the build does not
# pull (AENV_IMAGE_PULL=never, the default here).
#   sudo bash scripts/test-deploy.sh [fast|install|image|compose|systemd]...   (default: all)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ "$(id -u)" = 0 ] || { echo "test-deploy: must run as root" >&2; exit 1; }
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(fast install image compose systemd)
want() { [[ " ${steps[*]} " == *" $1 "* ]]; }

templates=${AENV_TEST_TEMPLATES_DIR:-/var/lib/aenv/templates}
image=${AENV_TEST_IMAGE:-localhost/aenv:test}
key=test-deploy-key-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
port_install=${AENV_TEST_PORT_INSTALL:-18100}
port_image=${AENV_TEST_PORT_IMAGE:-18300}
port_gateway=${AENV_TEST_PORT_GATEWAY:-18380}
port_systemd=${AENV_TEST_PORT_SYSTEMD:-18480}
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
  podman rm -f -v -t 60 aenv-test-deploy-node aenv-test-deploy-systemd >/dev/null 2>&1
  podman rmi localhost/aenv-systemd:test >/dev/null 2>&1
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
if [ ${#need[@]} -gt 0 ] && { want image || want compose || want systemd; }; then
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
  podman rm -f -v aenv-test-deploy-node >/dev/null
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

if want systemd; then
  say "== systemd: the units under systemd as PID 1 (a privileged container)"
  podman image exists "$image" || bash deploy/docker/build.sh "$image" >/dev/null
  mkdir -p "$work/systemd"
  printf '%s\n' "FROM $image" \
    'RUN apt-get update && apt-get install -y --no-install-recommends systemd systemd-sysv dbus && rm -rf /var/lib/apt/lists/*' \
    'STOPSIGNAL SIGRTMIN+3' 'ENTRYPOINT ["/sbin/init"]' >"$work/systemd/Containerfile"
  buildah bud --pull=never -q -t localhost/aenv-systemd:test "$work/systemd" >/dev/null
  result "systemd: image with systemd built" $?
  c=aenv-test-deploy-systemd
  podman run -d --name $c --privileged --systemd=always "${ulimits[@]}" -p "127.0.0.1:$port_systemd:8080" \
    -v "$templates:/templates" localhost/aenv-systemd:test >/dev/null
  sleep 5
  # The units exactly as shipped (the image's /opt/aenv/bin/aenv-server and aenv-gateway are
  # the paths they name), a cluster node's settings in /etc/aenv, the gateway's user.
  podman cp deploy/systemd/aenv-server.service $c:/etc/systemd/system/
  podman cp deploy/systemd/aenv-gateway.service $c:/etc/systemd/system/
  printf 'listen = "0.0.0.0:8000"\ndata_dir = "/var/lib/aenv"\n' >"$work/systemd/config.toml"
  printf '%s\n' "AENV_API_KEY=$key" AENV_CLUSTER=redis://127.0.0.1:6379 AENV_NODE_ID=systemd-node \
    AENV_ADVERTISE_URL=http://127.0.0.1:8000 AENV_TEMPLATES_DIR=/templates AENV_NET_PREFIX=aedg \
    AENV_SLOT_CIDR=10.237.0.0/16 AENV_WARM_SLOTS=1 >"$work/systemd/aenv.env"
  podman exec $c mkdir -p /etc/aenv
  podman cp "$work/systemd/config.toml" $c:/etc/aenv/config.toml
  podman cp "$work/systemd/aenv.env" $c:/etc/aenv/aenv.env
  podman exec $c sh -ec '
    chmod 0600 /etc/aenv/aenv.env
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin aenv
    systemd-analyze verify /etc/systemd/system/aenv-server.service /etc/systemd/system/aenv-gateway.service
    systemctl daemon-reload
    systemctl enable --now redis-server aenv-server aenv-gateway 2>/dev/null'
  result "systemd: units enabled and started" $?
  gw=http://127.0.0.1:$port_systemd
  ready=0
  for _ in $(seq 60); do
    ready=$(curl -s -H "x-api-key: $key" "$gw/nodes" | grep -o '"status":"ready"' | wc -l)
    [ "$ready" = 1 ] && break
    sleep 1
  done
  podman exec $c sh -c '
    echo "active: $(systemctl is-active redis-server aenv-server aenv-gateway | tr "\n" " ")"
    echo "gateway runs as: $(ps -o user= -p $(systemctl show -p MainPID --value aenv-gateway))"
    grep -E "^(CapBnd|NoNewPrivs)" /proc/$(systemctl show -p MainPID --value aenv-server)/status' | sed 's/^/  /'
  [ "$ready" = 1 ]
  result "systemd: the gateway sees the node ready" $?
  smoke "$gw" "$key"
  result "systemd: SDK through the gateway: create/pause/resume" $?
  id=$(node --input-type=module -e '
    import { Sandbox } from "e2b";
    const [url, apiKey] = process.argv.slice(1);
    const s = await Sandbox.create({ apiUrl: url, sandboxUrl: url, apiKey, timeoutMs: 600000 });
    await s.commands.run("nohup sleep 300000 >/dev/null 2>&1 &");
    console.log(s.sandboxId);' "$gw" "$key")
  podman exec $c sh -c 'kill -9 $(systemctl show -p MainPID --value aenv-server)'
  restarted="" adopted=1
  for _ in $(seq 30); do
    sleep 1
    restarted=$(podman exec $c systemctl show -p NRestarts --value aenv-server)
    podman exec $c journalctl -u aenv-server -o cat | grep -q "\"sandboxID\":\"$id\".*running sandbox adopted" &&
      adopted=0 && break
  done
  [ "$restarted" = 1 ] && [ $adopted = 0 ]
  result "systemd: kill -9 -> restarted (NRestarts=$restarted), its running sandbox adopted" $?
  # Right after a restart the gateway may still hold the node for dead (heartbeat expiry).
  sleep 8
  node --input-type=module -e '
    import { Sandbox } from "e2b";
    const [url, apiKey, id] = process.argv.slice(1);
    const s = await Sandbox.connect(id, { apiUrl: url, sandboxUrl: url, apiKey });
    const r = await s.commands.run("pgrep -f \"sleep 300000\"");
    console.log(`  the process after the crash: pid ${r.stdout.trim()}`);' "$gw" "$key" "$id"
  result "systemd: the sandbox and its process survived the crash" $?
  podman exec $c systemctl stop aenv-server
  podman exec $c sh -c 'systemctl show -p Result -p ExecMainStatus aenv-server | tr "\n" " "; echo
    journalctl -u aenv-server -o cat | grep "\"msg\":\"drain" | cut -c1-220' | sed 's/^/  /'
  [ "$(podman exec $c systemctl show -p Result --value aenv-server)" = success ] &&
    podman exec $c journalctl -u aenv-server -o cat | grep -q "\"paused\":\[\"$id\"\]" &&
    ! podman exec $c sh -c 'ps -e -o comm | grep -q "^exe$"'
  result "systemd: systemctl stop drains (the sandbox paused into the repository, no runsc left)" $?
  podman rm -f -v -t 10 $c >/dev/null
  podman rmi localhost/aenv-systemd:test >/dev/null 2>&1
fi

echo "${passed} passed, ${failed} failed"
[ "$failed" = 0 ]
