#!/usr/bin/env bash
# Installs aenv from this source checkout as a system service:
#   PREFIX/app       the built app with its production node modules (node itself is the host's)
#   PREFIX/bin       aenv-server, aenv-gateway, aenv (wrappers around the host's node)
#   SYSCONF          config.toml and aenv.env (API key, cluster settings; 0600), kept if present
#   UNITDIR          aenv-server.service, aenv-gateway.service (from deploy/systemd/)
#   DATA/templates   the `base` template (built, or copied with --templates-from)
#   a system user `aenv` that runs the gateway (the node must run as root)
# System packages (runsc from bookworm-backports, redis-server, ...) come from
# scripts/install-deps.sh. Redis for a cluster is Debian's redis-server.service.
#
#   sudo bash scripts/install.sh [--prefix /opt/aenv] [--sysconfdir /etc/aenv]
#        [--unitdir /etc/systemd/system] [--data-dir /var/lib/aenv] [--user aenv | --no-user]
#        [--no-deps] [--no-template | --templates-from DIR] [--enable]
#   sudo bash scripts/install.sh --uninstall [--prefix /opt/aenv] [--purge]
#   bash scripts/install.sh --stage-app DIR     only build and stage the app into DIR (the
#                                               container image's build context uses this)
#
# --uninstall stops and removes the units, PREFIX and the user it created; the config and
# the data dir (sandboxes, snapshots, templates) stay unless --purge is given.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
prefix=/opt/aenv sysconf=/etc/aenv unitdir=/etc/systemd/system data=/var/lib/aenv
user=aenv deps=1 template=1 templates_from="" enable=0 uninstall=0 purge=0 stage_only=""
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) prefix=$2; shift ;;
    --sysconfdir) sysconf=$2; shift ;;
    --unitdir) unitdir=$2; shift ;;
    --data-dir) data=$2; shift ;;
    --user) user=$2; shift ;;
    --no-user) user="" ;;
    --no-deps) deps=0 ;;
    --no-template) template=0 ;;
    --templates-from) templates_from=$2; shift ;;
    --enable) enable=1 ;;
    --uninstall) uninstall=1 ;;
    --purge) purge=1 ;;
    --stage-app) stage_only=$2; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$stage_only" ] || [ "$(id -u)" = 0 ] || { echo "install: must run as root" >&2; exit 1; }
say() { echo "install: $*"; }
systemd_up() { [ -d /run/systemd/system ]; }
# rm -rf, but never of a system folder a mistyped --prefix/--sysconfdir/--data-dir could name.
remove_tree() {
  local p
  p=$(realpath -m "$1")
  case $p in
    / | /bin | /boot | /dev | /etc | /home | /lib | /lib64 | /opt | /proc | /root | /run | /sbin | /srv | /sys | /tmp | \
      /usr | /usr/* | /var | /var/lib | /var/tmp | /var/cache | /var/log)
      echo "install: refusing to remove $p" >&2
      return 1
      ;;
  esac
  rm -rf "$p"
}
units=(aenv-server.service aenv-gateway.service)

if [ $uninstall = 1 ]; then
  record="$prefix/install.env"
  [ -f "$record" ] || { echo "install: no aenv installation at $prefix ($record missing)" >&2; exit 1; }
  # shellcheck disable=SC1090
  . "$record"
  if systemd_up; then
    for u in "${units[@]}"; do systemctl disable --now "$u" 2>/dev/null || true; done
  fi
  for u in "${units[@]}"; do rm -f "$AENV_UNITDIR/$u"; done
  systemd_up && systemctl daemon-reload || true
  remove_tree "$prefix"
  say "removed $prefix and the units in $AENV_UNITDIR"
  if [ -n "$AENV_USER_CREATED" ] && id "$AENV_USER_CREATED" >/dev/null 2>&1; then
    userdel "$AENV_USER_CREATED" && say "removed user $AENV_USER_CREATED"
  fi
  if [ $purge = 1 ]; then
    remove_tree "$AENV_SYSCONF"
    remove_tree "$AENV_DATA_DIR"
    say "purged $AENV_SYSCONF and $AENV_DATA_DIR"
  else
    say "kept $AENV_SYSCONF and $AENV_DATA_DIR (--purge removes them)"
  fi
  exit 0
fi

node=$(command -v node || true)
if [ -z "$node" ] || ! "$node" -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=18)?0:1)'; then
  echo "install: Node.js >= 20.18 is required (found: $($node --version 2>/dev/null || echo none))" >&2
  exit 1
fi
[ $deps = 1 ] && [ -z "$stage_only" ] && bash "$src/scripts/install-deps.sh"

cd "$src"
if [ ! -d node_modules/e2b ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "npm ci"; npm ci --no-audit --no-fund
fi
say "building"; npm run build --silent

# The app: built packages and production node modules (native ones built for this node).
stage_app() { # DIR
  local stage=$1
  # Sandboxes run the Go envd: built only where Go is installed.
  [ -x packages/envd/dist/envd-native ] || {
    echo "install: packages/envd/dist/envd-native was not built: install golang-go (scripts/install-deps.sh) and build again" >&2
    exit 1
  }
  rm -rf "$stage"; mkdir -p "$stage/packages" "$stage/scripts"
  cp -a package.json package-lock.json README.md docs "$stage/"
  cp -a scripts/build-base-template.sh "$stage/scripts/"
  for p in protocol envd edge server gateway cli dashboard; do
    mkdir -p "$stage/packages/$p"
    for part in package.json dist bin; do
      [ -e "packages/$p/$part" ] && cp -a "packages/$p/$part" "$stage/packages/$p/"
    done
  done
  cp -a node_modules "$stage/"
  say "pruning dev dependencies"
  (cd "$stage" && npm prune --omit=dev --offline --no-audit --no-fund --silent)
}
if [ -n "$stage_only" ]; then
  stage_app "$stage_only"
  say "app staged in $stage_only ($(du -sh "$stage_only" | cut -f1))"
  exit 0
fi
# Staged beside PREFIX/app and swapped in.
mkdir -p "$prefix"
stage_app "$prefix/app.new"
rm -rf "$prefix/app.old"
[ -d "$prefix/app" ] && mv "$prefix/app" "$prefix/app.old"
mv "$prefix/app.new" "$prefix/app"
rm -rf "$prefix/app.old"

mkdir -p "$prefix/bin"
wrap() { # NAME SCRIPT
  printf '#!/bin/sh\nexec %s %s "$@"\n' "$node" "$prefix/app/$2" >"$prefix/bin/$1"
  chmod 0755 "$prefix/bin/$1"
}
wrap aenv-server packages/server/bin/aenv-server.js
wrap aenv-gateway packages/gateway/bin/aenv-gateway.js
wrap aenv packages/cli/bin/aenv.js

# Config: written once, never overwritten (an upgrade keeps the operator's settings and key).
mkdir -p "$sysconf"; chmod 0755 "$sysconf"
if [ ! -f "$sysconf/config.toml" ]; then
  sed "s#\"/var/lib/aenv\"#\"$data\"#" "$src/deploy/systemd/config.toml" >"$sysconf/config.toml"
  say "wrote $sysconf/config.toml"
fi
if [ ! -f "$sysconf/aenv.env" ]; then
  key=e2b_$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
  repokey=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  (umask 077; sed "s#@API_KEY@#$key#; s#@REPOSITORY_KEY@#$repokey#" "$src/deploy/systemd/aenv.env" >"$sysconf/aenv.env")
  say "wrote $sysconf/aenv.env with a new API key and repository key (copy both to every cluster node)"
fi

created=""
if [ -n "$user" ] && ! id "$user" >/dev/null 2>&1; then
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
  created=$user
  say "created system user $user"
fi

mkdir -p "$unitdir"
for u in "${units[@]}"; do
  sed -e "s#/opt/aenv#$prefix#g" -e "s#/etc/aenv#$sysconf#g" "$src/deploy/systemd/$u" >"$unitdir/$u.tmp"
  if [ "$u" = aenv-gateway.service ]; then
    if [ -n "$user" ]; then
      sed -i -e "s/^User=aenv$/User=$user/" -e "s/^Group=aenv$/Group=$user/" "$unitdir/$u.tmp"
    else
      # No named user: systemd allocates one for the gateway's lifetime.
      sed -i -e 's/^User=aenv$/DynamicUser=yes/' -e '/^Group=aenv$/d' "$unitdir/$u.tmp"
    fi
  fi
  mv "$unitdir/$u.tmp" "$unitdir/$u"
done
say "units in $unitdir: ${units[*]}"

# What uninstall needs to know; a reinstall keeps the user an earlier install created.
if [ -z "$created" ] && [ -f "$prefix/install.env" ]; then
  created=$(. "$prefix/install.env"; echo "${AENV_USER_CREATED:-}")
fi
cat >"$prefix/install.env" <<REC
AENV_SYSCONF='$sysconf'
AENV_UNITDIR='$unitdir'
AENV_DATA_DIR='$data'
AENV_USER_CREATED='$created'
REC

if [ $template = 1 ]; then
  mkdir -p "$data/templates"
  if [ -n "$templates_from" ] && [ ! -f "$data/templates/base/template.json" ]; then
    cp -a "$templates_from/base" "$data/templates/base"
    say "copied the base template from $templates_from"
  else
    bash "$prefix/app/scripts/build-base-template.sh" "$data/templates"
  fi
fi

if command -v systemd-analyze >/dev/null; then
  (cd "$unitdir" && systemd-analyze verify "${units[@]/#/$unitdir/}") && say "systemd-analyze verify: ok"
fi
if systemd_up; then
  systemctl daemon-reload
  if [ $enable = 1 ]; then systemctl enable --now aenv-server.service && say "aenv-server started"; fi
fi
say "done. Start a single node:  systemctl enable --now aenv-server"
say "a cluster: set AENV_CLUSTER (and node ID, advertise URL, shared repository) in $sysconf/aenv.env;"
say "  on the Redis host: apt-get install redis-server (bind it to the cluster network);"
say "  gateways: systemctl enable --now aenv-gateway   (API key: $sysconf/aenv.env)"
