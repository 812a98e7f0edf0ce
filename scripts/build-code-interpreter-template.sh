#!/usr/bin/env bash
# Builds the template `code-interpreter-v1`, the default of the @e2b/code-interpreter SDK:
# the `base` tree plus Debian bookworm's Jupyter stack (jupyter-server, ipykernel, numpy,
# pandas, matplotlib, scipy, sympy, seaborn) and Node, with aenv's code-interpreter service
# (packages/code-interpreter, bundled by `npm run build`) as its start command on port 49999.
# Packed and imported like `base`. Cached: does nothing when the template holds this package
# set and this service; a new service alone reuses the installed packages (seconds).
# The start command restarts the service should it exit (it does when jupyter-server dies).
# Usage: build-code-interpreter-template.sh TEMPLATES_DIR   (after build-base-template.sh)
set -euo pipefail
dir=${1:?usage: build-code-interpreter-template.sh TEMPLATES_DIR}
here=$(cd "$(dirname "$0")" && pwd)
id=code-interpreter-v1
t="$dir/$id"
# Bump when the package set or the tree's setup changes.
PACKAGES_REVISION=2
# Node.js (the service itself and the JavaScript cells) is base's, in /usr/local/bin.
pkgs="python3-jupyter-server python3-ipykernel python3-numpy python3-pandas python3-matplotlib python3-scipy"
pkgs="$pkgs python3-sympy python3-seaborn"
svc="$here/../packages/code-interpreter/dist"
[ -f "$svc/server.cjs" ] && [ -f "$svc/js-runner.cjs" ] || {
  echo "code-interpreter template: $svc/server.cjs missing (run npm run build first)" >&2
  exit 1
}
opt=opt/aenv/code-interpreter
pkg_hash=$(printf '%s %s' "$PACKAGES_REVISION" "$pkgs" | sha256sum | cut -d' ' -f1)
svc_hash=$(cat "$svc/server.cjs" "$svc/js-runner.cjs" "$0" | sha256sum | cut -d' ' -f1)
current=
if [ -f "$t/template.json" ]; then
  current="$t/$(sed -n 's/.*"rootfsDir": *"\([^"]*\)".*/\1/p' "$t/template.json")"
  if [ "$(cat "$current/$opt/packages.hash" 2>/dev/null)" = "$pkg_hash" ] &&
    [ "$(cat "$current/$opt/service.hash" 2>/dev/null)" = "$svc_hash" ]; then
    echo "code-interpreter template: cached at $t"
    exit 0
  fi
fi
base="$dir/base/$(sed -n 's/.*"rootfsDir": *"\([^"]*\)".*/\1/p' "$dir/base/template.json" 2>/dev/null)"
[ -d "$base/etc" ] || { echo "code-interpreter template: needs the base template in $dir (build-base-template.sh)" >&2; exit 1; }
work=${AENV_BASE_BUILD_DIR:-$dir}
tmp="$work/.code-interpreter.tmp.$$"
cleanup() { # DIR: never into /dev or /proc, should they still be mounted there
  umount "$1/rootfs/proc" "$1/rootfs/dev" 2>/dev/null || true
  rm -rf --one-file-system "$1"
}
for old in "$work"/.code-interpreter.tmp.*; do [ -e "$old" ] && cleanup "$old"; done
mkdir -p "$tmp"
trap 'cleanup "$tmp"' EXIT
if [ -n "$current" ] && [ "$(cat "$current/$opt/packages.hash" 2>/dev/null)" = "$pkg_hash" ]; then
  echo "code-interpreter template: new service, packages unchanged"
  cp -a --reflink=auto "$current" "$tmp/rootfs"
else
  echo "code-interpreter template: installing $pkgs from Debian — takes several minutes"
  cp -a --reflink=auto "$base" "$tmp/rootfs"
  cp /etc/resolv.conf "$tmp/rootfs/etc/resolv.conf"
  # apt verifies with gpgv, which needs a real /dev; maintainer scripts want /proc.
  mount --bind /dev "$tmp/rootfs/dev"
  mount -t proc proc "$tmp/rootfs/proc"
  chroot "$tmp/rootfs" apt-get update -q 2>&1 | sed -n 's/^\(E:\|W:\)/code-interpreter template: &/p'
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive chroot "$tmp/rootfs" apt-get install -y -q --no-install-recommends $pkgs 2>&1 |
    awk '/^(Unpacking|Setting up) /{n++; if (n%40==0) {print "code-interpreter template: " $0; fflush()}} /^(E:|W:)/{print; fflush()}'
  chroot "$tmp/rootfs" python3 -c 'import jupyter_server, ipykernel, numpy, pandas, matplotlib, scipy, sympy, seaborn' ||
    { echo "code-interpreter template: package install failed" >&2; exit 1; }
  chroot "$tmp/rootfs" apt-get clean
  # Fonts are cached once here, not by the first plot in every sandbox.
  chroot "$tmp/rootfs" su user -c 'python3 -c "import matplotlib.pyplot"' >/dev/null 2>&1 || true
  umount "$tmp/rootfs/proc" "$tmp/rootfs/dev"
  : > "$tmp/rootfs/etc/resolv.conf"
  rm -rf "$tmp/rootfs/var/lib/apt/lists/"*
  mkdir -p "$tmp/rootfs/$opt"
  echo "$pkg_hash" > "$tmp/rootfs/$opt/packages.hash"
fi
install -m 0644 "$svc/server.cjs" "$svc/js-runner.cjs" "$tmp/rootfs/$opt/"
echo "$svc_hash" > "$tmp/rootfs/$opt/service.hash"
# shellcheck source=lib/pack-oci.sh
. "$here/lib/pack-oci.sh"
pack_oci "$tmp/rootfs" "$tmp/oci" org.aenv.code-interpreter.packages "$PACKAGES_REVISION"
rm -rf "$tmp/rootfs"
node "$here/../packages/server/bin/aenv-server.js" import-template --templates-dir "$dir" \
  --id "$id" --name "$id" --alias code-interpreter \
  --start-cmd "while :; do node /$opt/server.cjs >>/tmp/code-interpreter.log 2>&1; sleep 1; done" \
  --ready-cmd "curl -sf -o /dev/null http://127.0.0.1:49999/health" "oci:$tmp/oci:latest"
cleanup "$tmp"; trap - EXIT
echo "code-interpreter template: ready at $t ($(du -sh "$t" | cut -f1))"
