#!/bin/bash
# release.sh VERSION OUT: what `make release` makes, from the binaries `make build` left in
# bin/ (they must name VERSION): in OUT,
#
#   crijournal-VERSION-linux-amd64.tar.gz   the binaries, the systemd unit, a default
#                                           configuration, bash completion, crictl.yaml, the
#                                           CNI bridge and the signature policy, with the
#                                           README and the CHANGELOG
#   crijournal_VERSION-1_amd64.deb          the packages, made by nfpm (nfpm.yaml; nfpm is
#   crijournal-VERSION-1.x86_64.rpm         built from the module pinned in tools/go.mod)
#   SHA256SUMS                              their checksums (sha256sum -c SHA256SUMS)
#
# The default configuration is `crijournal config`'s, every key commented out: each names
# its default, none sets it, so a node gets the defaults of the release it runs (an older
# release refuses keys it does not know; see README, "Upgrading and rolling back").
# For the package test (packaging/packages_test.go), which packs the same binaries as a
# lower version: RELEASE_ANY_BINARY=1 skips the check that the binary names VERSION,
# RELEASE_PACKAGES_ONLY=1 makes no tarball, and NFPM names an nfpm binary already built.
set -euo pipefail

version=${1:?usage: release.sh VERSION OUT}
out=${2:?usage: release.sh VERSION OUT}
root=$(cd "$(dirname "$0")/.." && pwd)
name=crijournal-$version-linux-amd64

for b in crijournal crijournal-pause crijournal-pause-sleep; do
	[ -x "$root/bin/$b" ] || { echo "release: bin/$b missing: run make build first" >&2; exit 1; }
done
said=$("$root/bin/crijournal" --version | head -n 1)
if [ "$said" != "crijournal $version" ] && [ "${RELEASE_ANY_BINARY:-}" != 1 ]; then
	echo "release: bin/crijournal says \"$said\", not \"crijournal $version\": make build VERSION=$version" >&2
	exit 1
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "$out/.release.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage=$work/stage
mkdir -p "$stage/bin"

for b in crijournal crijournal-pause crijournal-pause-sleep; do
	install -m 0755 "$root/bin/$b" "$stage/bin/$b"
done
sed 's|@BINDIR@|/usr/bin|g' "$root/contrib/systemd/crijournal.service" >"$stage/crijournal.service"
"$root/bin/crijournal" completion bash >"$stage/crijournal.bash"
{
	echo "# The defaults of crijournal, every key commented out: uncomment a key to set it."
	"$root/bin/crijournal" config --config /dev/null | sed -E 's/^([a-z_]+ = )/# \1/; s/^(\[)/# \1/'
} >"$stage/crijournal.toml"
# The commented file must set nothing: the configuration it gives is the defaults.
if ! diff <("$root/bin/crijournal" config --config /dev/null) \
	<("$root/bin/crijournal" config --config "$stage/crijournal.toml") >/dev/null; then
	echo "release: the default configuration sets a key: a line of crijournal config was not commented out" >&2
	exit 1
fi
install -m 0644 "$root/contrib/crictl.yaml" "$stage/crictl.yaml"
install -m 0644 "$root/contrib/cni/10-crijournal-bridge.conflist" "$stage/10-crijournal-bridge.conflist"
install -m 0644 "$root/contrib/containers/policy.json" "$stage/policy.json"

# The tarball: one directory; its unit runs /usr/local/bin/crijournal, as make install's.
made=()
if [ "${RELEASE_PACKAGES_ONLY:-}" != 1 ]; then
	tree=$work/$name
	mkdir -p "$tree"
	cp -a "$stage/." "$tree/"
	sed 's|@BINDIR@|/usr/local/bin|g' "$root/contrib/systemd/crijournal.service" >"$tree/crijournal.service"
	install -m 0644 "$root/README.md" "$root/CHANGELOG.md" "$tree/"
	tar -C "$work" --owner=0 --group=0 --numeric-owner -czf "$out/$name.tar.gz" "$name"
	made+=("$name.tar.gz")
fi

# The packages: nfpm runs where the staged files are (nfpm.yaml names them relative).
nfpm=${NFPM:-$work/nfpm}
if [ -z "${NFPM:-}" ]; then
	(cd "$root/tools" && go build -o "$nfpm" github.com/goreleaser/nfpm/v2/cmd/nfpm)
fi
cp "$root/packaging/nfpm.yaml" "$work/"
cp -r "$root/packaging/scripts" "$work/"
deb=crijournal_${version}-1_amd64.deb
rpm=crijournal-${version}-1.x86_64.rpm
(cd "$work" && VERSION=$version "$nfpm" package --config nfpm.yaml --packager deb --target "$out/$deb" >/dev/null)
(cd "$work" && VERSION=$version "$nfpm" package --config nfpm.yaml --packager rpm --target "$out/$rpm" >/dev/null)

made+=("$deb" "$rpm")
(cd "$out" && sha256sum "${made[@]}" >SHA256SUMS)
echo "release: in $out: ${made[*]} SHA256SUMS"
