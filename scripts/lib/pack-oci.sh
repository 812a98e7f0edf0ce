# Sourced by the template build scripts. pack_oci TREE OUT LABEL REVISION: packs TREE as a
# one-layer OCI image layout in OUT (an uncompressed-tar layer, zstd on disk) whose config
# names the user `user`, its home as workdir, the default PATH and the label LABEL=REVISION.
pack_oci() {
  local tree=$1 oci=$2 label=$3 revision=$4 diff_id layer config manifest
  mkdir -p "$oci/blobs/sha256"
  tar --numeric-owner --xattrs --sort=name -C "$tree" -cf "$oci/layer.tar" .
  diff_id=$(sha256sum "$oci/layer.tar" | cut -d' ' -f1)
  zstd -q -T0 -3 --rm "$oci/layer.tar" -o "$oci/layer.tar.zst"
  layer=$(oci_desc "$oci" "$oci/layer.tar.zst" application/vnd.oci.image.layer.v1.tar+zstd)
  printf '{"architecture":"%s","os":"linux","config":{"User":"user","WorkingDir":"/home/user","Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Labels":{"%s":"%s"}},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$(dpkg --print-architecture)" "$label" "$revision" "$diff_id" > "$oci/config.json"
  config=$(oci_desc "$oci" "$oci/config.json" application/vnd.oci.image.config.v1+json)
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":[%s]}' \
    "$config" "$layer" > "$oci/manifest.json"
  manifest=$(oci_desc "$oci" "$oci/manifest.json" application/vnd.oci.image.manifest.v1+json \
    '{"org.opencontainers.image.ref.name":"latest"}')
  printf '{"schemaVersion":2,"manifests":[%s]}' "$manifest" > "$oci/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' > "$oci/oci-layout"
}

# oci_desc OCI FILE MEDIATYPE [ANNOTATIONS] -> descriptor JSON on stdout; moves FILE into the layout.
oci_desc() {
  local d s; d=$(sha256sum "$2" | cut -d' ' -f1); s=$(stat -c %s "$2")
  mv "$2" "$1/blobs/sha256/$d"
  printf '{"mediaType":"%s","digest":"sha256:%s","size":%s%s}' "$3" "$d" "$s" "${4:+,\"annotations\":$4}"
}
