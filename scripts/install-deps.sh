#!/usr/bin/env bash
# Installs every system package aenv and its tests need, from Debian bookworm and
# bookworm-backports only. Idempotent: safe to run again.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "install-deps: must run as root" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive

src=/etc/apt/sources.list.d/aenv-backports.sources
if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  mirror=$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$mirror" >"$src"
  rm -f /var/lib/aenv-apt-updated
fi

need=()
# gcc + libc6-dev build the static PID-1 reaper (packages/envd/init); golang-go (1.19) builds the
# native envd (packages/envd/native) with golang-google-protobuf-dev as its one module (no module
# downloads), and protobuf-compiler + protoc-gen-go regenerate its messages from the .proto files;
# go-fuse with x/sys, x/sync and godebug (the modules its go.mod names) build aenv-lazyfs, the
# FUSE server of image trees fetched on demand (packages/server/native); zstd compresses snapshot
# chunks and unpacks zstd image layers; docker-registry + skopeo serve the image tests' registry,
# busybox-static is the tiny image those tests build; redis-server holds a cluster's state
# (its tests start their own on a free port) and, as `redis-server CONF --sentinel` (what the
# redis-sentinel package's command runs), the sentinels of test/cluster-sentinel.test.ts. systemd's systemd-analyze verifies the units in
# deploy/systemd/ and kubectl renders the kustomize base in deploy/kubernetes/ (test/deploy.test.ts);
# Debian's kubectl comes with kubernetes-client, skipped when a kubectl is already installed.
# tini (-s, a subreaper) reaps the sandboxes' processes at once where PID 1 is slow to: runsc's
# delete waits until the killed sandbox process is reaped (1-2 s per removal behind a lazy init).
# chromium is the browser test/dashboard.test.ts drives (playwright-core, which never downloads one).
for p in tini debootstrap nftables iproute2 util-linux ca-certificates openssl tmux procps gcc libc6-dev golang-go \
  golang-google-protobuf-dev protobuf-compiler protoc-gen-go zstd \
  golang-github-hanwen-go-fuse-dev golang-golang-x-sys-dev golang-golang-x-sync-dev golang-github-kylelemons-godebug-dev \
  docker-registry skopeo busybox-static redis-server systemd chromium; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client)
runsc_ok=0
if dpkg -s runsc >/dev/null 2>&1 && dpkg-query -W -f='${Version}' runsc | grep -q '^0.0~2024'; then runsc_ok=1; fi

if [ ${#need[@]} -gt 0 ] || [ $runsc_ok = 0 ]; then
  echo "install-deps: apt-get update"
  apt-get update -qq
  if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: installing ${need[*]}"
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  if [ $runsc_ok = 0 ]; then
    # bookworm's runsc (20221219) breaks coreutils' statx and netstack; backports' works.
    echo "install-deps: installing runsc from bookworm-backports"
    apt-get install -y -qq -t bookworm-backports runsc >/dev/null
  fi
fi
echo "install-deps: runsc $(runsc --version 2>/dev/null | head -1)"
