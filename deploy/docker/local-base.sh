#!/usr/bin/env bash
# Makes the Containerfile's base image, docker.io/library/debian:bookworm, without a registry:
# debootstrap (minbase) from the Debian mirror this host uses, packed as a tarball (cached) and
# imported into containers-storage under the exact name `FROM` asks for, so that
# `buildah bud --pull=never` builds offline. Hosts that reach Docker Hub do not need this.
# Usage: local-base.sh [CACHE_DIR]   (default /var/cache/aenv-deploy); idempotent.
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "local-base: must run as root" >&2; exit 1; }
name=docker.io/library/debian:bookworm
cache=${1:-/var/cache/aenv-deploy}
tarball="$cache/debian-bookworm-minbase.tar"
if podman image exists "$name" 2>/dev/null; then
  echo "local-base: $name already in containers-storage"
  exit 0
fi
if [ ! -s "$tarball" ]; then
  mirror=$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.rootfs.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "local-base: debootstrap --variant=minbase bookworm from $mirror (a few minutes, once)"
  debootstrap --variant=minbase bookworm "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
    { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
  # The same apt sources the official image has, pointing at the same mirror.
  rm -f "$tmp/rootfs/etc/apt/sources.list"
  printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" >"$tmp/rootfs/etc/apt/sources.list.d/debian.sources"
  rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
  tar --numeric-owner --xattrs -C "$tmp/rootfs" -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  rm -rf "$tmp"; trap - EXIT
fi
podman import --change 'CMD ["bash"]' "$tarball" "$name" >/dev/null
echo "local-base: imported $name from $tarball"
