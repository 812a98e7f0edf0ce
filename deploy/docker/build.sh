#!/usr/bin/env bash
# Builds the aenv image with buildah (no daemon):
#   deploy/docker/build.sh [IMAGE]        (default localhost/aenv:latest)
# The build context is made here: the app built and staged by scripts/install.sh --stage-app
# (production node modules, native ones built for this host's node) and this host's node
# binary (>= 20.18; the image is Debian bookworm like the host, so its libraries match).
# FROM docker.io/library/debian:bookworm: pulled where a registry is reachable; set
# AENV_IMAGE_PULL=never to use the local copy made by deploy/docker/local-base.sh instead.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
image=${1:-localhost/aenv:latest}
ctx=$(mktemp -d /var/tmp/aenv-image-ctx.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
bash "$root/scripts/install.sh" --stage-app "$ctx/app"
cp -L "$(command -v node)" "$ctx/node"
cp "$here/Containerfile" "$here/entrypoint.sh" "$ctx/"
buildah bud --layers --pull="${AENV_IMAGE_PULL:-missing}" -f "$ctx/Containerfile" -t "$image" "$ctx"
echo "build: $image ($(podman image inspect --format '{{.Size}}' "$image" | numfmt --to=iec))"
