#!/usr/bin/env bash
# Builds the default template `base`: a Debian bookworm root filesystem with the tools agents
# expect and a non-root user `user` (uid 1000). Cached: does nothing when the template exists.
# Usage: build-base-template.sh TEMPLATES_DIR
set -euo pipefail
dir=${1:?usage: build-base-template.sh TEMPLATES_DIR}
t="$dir/base"
# Bump when the tree changes; warm images are keyed by it.
REVISION=2

# Login shells (every SDK command is `bash -l -c`) fork `id` in /etc/profile: ~50 ms each
# inside gVisor. bash knows the uid already.
tune() {
  sed -i 's/"$(id -u)"/"${EUID}"/g' "$1/etc/profile"
}

if [ -f "$t/template.json" ]; then
  have=$(sed -n 's/.*"revision":\([0-9]*\).*/\1/p' "$t/template.json")
  if [ "${have:-1}" -lt "$REVISION" ]; then
    tune "$t/rootfs"
    sed -i "s/\"revision\":[0-9]*,//; s/^{/{\"revision\":$REVISION,/" "$t/template.json"
    echo "base template: updated to revision $REVISION"
  fi
  echo "base template: cached at $t"
  exit 0
fi
mirror=$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}
tmp="$dir/.base.tmp.$$"
rm -rf "$dir"/.base.tmp.* ; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
pkgs=bash,coreutils,python3,git,curl,ca-certificates,procps,iproute2,less,sudo,xz-utils
echo "base template: debootstrap bookworm ($pkgs) from $mirror — takes a few minutes"
debootstrap --variant=minbase --include="$pkgs" bookworm "$tmp/rootfs" "$mirror" 2>&1 \
  | awk '/^I: (Retrieving|Validating|Extracting|Unpacking|Configuring|Installing)/{n++; if (n%25==0) {print "base template: " $0; fflush()}} /^[EW]:/{print; fflush()}'
[ -x "$tmp/rootfs/bin/bash" ] || { echo "base template: debootstrap failed" >&2; exit 1; }
chroot "$tmp/rootfs" /usr/sbin/useradd -m -u 1000 -s /bin/bash user
echo 'user ALL=(ALL) NOPASSWD:ALL' > "$tmp/rootfs/etc/sudoers.d/user"
chmod 0440 "$tmp/rootfs/etc/sudoers.d/user"
echo aenv > "$tmp/rootfs/etc/hostname"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$tmp/rootfs/etc/hosts"
# The resolver is handed in at run time; keep an empty file to bind over.
: > "$tmp/rootfs/etc/resolv.conf"
mkdir -p "$tmp/rootfs/.aenv"
tune "$tmp/rootfs"
rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*
cat > "$tmp/template.json" <<JSON
{"revision":$REVISION,"id":"base","name":"base","user":"user","workdir":"/home/user","env":{"PATH":"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},"cpuCount":2,"memoryMB":1024,"diskSizeMB":2048,"createdAt":"$(date -u +%FT%TZ)"}
JSON
mkdir -p "$dir"; rm -rf "$t"; mv "$tmp" "$t"; trap - EXIT
echo "base template: ready at $t ($(du -sh "$t/rootfs" | cut -f1))"
