#!/usr/bin/env bash
# Builds the default template `base`: a Debian bookworm root filesystem with the tools agents
# expect and a non-root user `user` (uid 1000). debootstrap makes the tree; it is packed as a
# one-layer OCI image and imported by `aenv-server import-template`, the same image machinery
# every other template goes through. Cached: does nothing when the template exists.
# Usage: build-base-template.sh TEMPLATES_DIR
set -euo pipefail
dir=${1:?usage: build-base-template.sh TEMPLATES_DIR}
t="$dir/base"
# Bump when the tree changes; warm images are keyed by it.
REVISION=3

# Login shells (every SDK command is `bash -l -c`) fork `id` in /etc/profile: ~50 ms each
# inside gVisor. bash knows the uid already.
tune() {
  sed -i 's/"$(id -u)"/"${EUID}"/g' "$1/etc/profile"
}

if [ -f "$t/template.json" ]; then
  have=$(sed -n 's/.*"revision":\([0-9]*\).*/\1/p' "$t/template.json")
  # Trees from before imports (rootfs/ beside template.json) are brought up to date in place.
  if [ -d "$t/rootfs" ] && [ "${have:-1}" -lt "$REVISION" ]; then
    tune "$t/rootfs"
    [ -e "$t/rootfs/usr/bin/python" ] || ln -s python3 "$t/rootfs/usr/bin/python"
    sed -i "s/\"revision\":[0-9]*,//; s/^{/{\"revision\":$REVISION,/" "$t/template.json"
    echo "base template: updated to revision $REVISION"
  fi
  # Revision 3 adds `python` (python-is-python3: E2B's base has it, and code run by agents and
  # E2B's own SDK tests call it). An imported tree without it is built again as a new revision.
  imported=$(sed -n 's/.*"rootfsDir": *"\([^"]*\)".*/\1/p' "$t/template.json")
  if [ -z "$imported" ] || [ -e "$t/$imported/usr/bin/python" ]; then
    echo "base template: cached at $t"
    exit 0
  fi
  echo "base template: revision $REVISION adds python; building it again"
fi
mirror=$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}
# The tree is built in DIR unless AENV_BASE_BUILD_DIR names another place: debootstrap refuses
# folders mounted nodev, as container volumes often are.
work=${AENV_BASE_BUILD_DIR:-$dir}
tmp="$work/.base.tmp.$$"
rm -rf "$work"/.base.tmp.* ; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
pkgs=bash,coreutils,python3,python-is-python3,git,curl,ca-certificates,procps,iproute2,less,sudo,xz-utils
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
# One uncompressed-tar layer (zstd on disk) plus a config naming the user, workdir and PATH.
# shellcheck source=lib/pack-oci.sh
. "$(dirname "$0")/lib/pack-oci.sh"
oci="$tmp/oci"
pack_oci "$tmp/rootfs" "$oci" org.aenv.base.revision "$REVISION"
rm -rf "$tmp/rootfs"
mkdir -p "$dir"
node "$(dirname "$0")/../packages/server/bin/aenv-server.js" import-template --templates-dir "$dir" \
  --id base --name base "oci:$oci:latest"
rm -rf "$tmp"; trap - EXIT
echo "base template: ready at $t ($(du -sh "$t" | cut -f1))"
