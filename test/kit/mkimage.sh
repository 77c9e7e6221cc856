#!/usr/bin/env bash
# mkimage.sh ROOTFS OUT.tar REFERENCE [CONFIG]: one single-layer image tarball from a root
# filesystem directory, with no registry and no container engine (tar, gzip, sha256sum, jq).
#
# CONFIG, a JSON object, is merged into the image configuration's "config" (Entrypoint,
# Cmd, User, Env, WorkingDir, Labels, StopSignal, ExposedPorts); PATH is set unless it
# gives Env.
#
# OUT.tar is at once
#   - an OCI image layout (oci-layout, index.json, blobs/sha256/...) whose index entry
#     carries io.containerd.image.name=REFERENCE and org.opencontainers.image.ref.name=<tag>:
#     `ctr images import` takes it, and registry.sh pushes it with crane, digests unchanged;
#   - a docker-archive (manifest.json, RepoTags [REFERENCE]) over the same blobs.
# The same input gives the same bytes: mtime 0, owner 0:0, sorted entries, gzip -n.
# Prints "OUT REFERENCE manifest=sha256:... config(imageID)=sha256:... layer=sha256:...".
set -euo pipefail

[ $# -ge 3 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
ROOTFS=$(cd "$1" && pwd)
OUT=$2
REF=$3
CFG=${4:-'{}'}
command -v jq >/dev/null || { echo "mkimage.sh: jq is required (apt-get install jq)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
blobs=$work/img/blobs/sha256
mkdir -p "$blobs"

# blob FILE: moves FILE into the layout under its digest and prints "<digest> <size>".
blob() {
	local d s
	d=$(sha256sum "$1" | cut -d' ' -f1)
	s=$(stat -c %s "$1")
	mv "$1" "$blobs/$d"
	echo "$d $s"
}

# The layer: the root filesystem's top-level entries, in a stable order.
(cd "$ROOTFS" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort) >"$work/top"
tar -C "$ROOTFS" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
	--format=gnu -cf "$work/layer.tar" -T "$work/top"
diffid=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -6 <"$work/layer.tar" >"$work/layer.tar.gz"
read -r ldig lsize < <(blob "$work/layer.tar.gz")

jq -cn --arg diffid "sha256:$diffid" --argjson cfg "$CFG" '{
	created: "1970-01-01T00:00:00Z",
	architecture: "amd64",
	os: "linux",
	config: ({Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]} + $cfg),
	rootfs: {type: "layers", diff_ids: [$diffid]},
	history: [{created: "1970-01-01T00:00:00Z", created_by: "crijournal test/kit/mkimage.sh"}]
}' >"$work/config.json"
read -r cdig csize < <(blob "$work/config.json")

jq -cn --arg c "sha256:$cdig" --argjson cs "$csize" --arg l "sha256:$ldig" --argjson ls "$lsize" '{
	schemaVersion: 2,
	mediaType: "application/vnd.oci.image.manifest.v1+json",
	config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
	layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $l, size: $ls}]
}' >"$work/manifest.json"
read -r mdig msize < <(blob "$work/manifest.json")

# The tag: the reference's last path element after ":" (latest without one).
last=${REF%%@*}
last=${last##*/}
case "$last" in *:*) tag=${last##*:} ;; *) tag=latest ;; esac
printf '{"imageLayoutVersion":"1.0.0"}' >"$work/img/oci-layout"
jq -cn --arg m "sha256:$mdig" --argjson ms "$msize" --arg ref "$REF" --arg tag "$tag" '{
	schemaVersion: 2,
	mediaType: "application/vnd.oci.image.index.v1+json",
	manifests: [{
		mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $ms,
		platform: {architecture: "amd64", os: "linux"},
		annotations: {"io.containerd.image.name": $ref, "org.opencontainers.image.ref.name": $tag}
	}]
}' >"$work/img/index.json"
jq -cn --arg c "blobs/sha256/$cdig" --arg l "blobs/sha256/$ldig" --arg ref "$REF" \
	'[{Config: $c, RepoTags: [$ref], Layers: [$l]}]' >"$work/img/manifest.json"

mkdir -p "$(dirname "$OUT")"
tar -C "$work/img" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
	-cf "$OUT.tmp" oci-layout index.json manifest.json blobs
mv "$OUT.tmp" "$OUT"
echo "$OUT $REF manifest=sha256:$mdig config(imageID)=sha256:$cdig layer=sha256:$ldig"
