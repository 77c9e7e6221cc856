# test/kit/lib.sh: sourced by the kit's scripts (and by contrib/bench/lib.sh, test/node-e2e,
# test/systemd, test/vm/critest-inside.sh). Sourced, not run.
#
# The kit's tools come from the repository itself, never from beside it:
#   kit_crane    prints the path of crane (go-containerregistry), the version tools/go.mod
#                pins: $CRANE if set, else bin/crane (built from tools/go.mod when missing or
#                older than it), else a crane of that version on PATH where bin/ cannot be
#                written (in test/vm's VM the checkout is read-only).
#   kit_critest  prints the path of critest (cri-tools $KIT_CRITEST_VERSION): $CRITEST if
#                set, else bin/critest or a critest on PATH of that version, else it builds
#                bin/critest as cri-tools' release does: `go test -c` of ./cmd/critest in a
#                writable copy of the module (its go.mod and go.sum, so its own dependencies).
# Each builds only when needed and says so on stderr.

KIT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KIT_ROOT=$(cd "$KIT_DIR/../.." && pwd)
KIT_BIN=${KIT_BIN:-$KIT_ROOT/bin}
KIT_CRITEST_VERSION=${KIT_CRITEST_VERSION:-v1.37.0}
# Where the kit's images are cached (images.sh OUTDIR); the bench and test/vm read them too.
KIT_IMAGES=${KIT_IMAGES:-/var/tmp/crij-images}
export PATH=/usr/local/go/bin:$PATH

kit_crane() {
	if [ -n "${CRANE:-}" ]; then echo "$CRANE"; return; fi
	local bin=$KIT_BIN/crane want
	if [ -x "$bin" ] && [ ! "$KIT_ROOT/tools/go.mod" -nt "$bin" ]; then echo "$bin"; return; fi
	want=$(cd "$KIT_ROOT/tools" && go list -m -f '{{.Version}}' github.com/google/go-containerregistry)
	if [ ! -w "$KIT_BIN" ] && [ ! -w "$KIT_ROOT" ] && command -v crane >/dev/null &&
		[ "$(crane version 2>/dev/null)" = "$want" ]; then
		command -v crane
		return
	fi
	echo "kit: building $bin (crane $want, tools/go.mod)" >&2
	mkdir -p "$KIT_BIN"
	(cd "$KIT_ROOT" && go build -modfile=tools/go.mod -o "$bin" github.com/google/go-containerregistry/cmd/crane) >&2 || return 1
	echo "$bin"
}

# kit_critest_version PATH: the version a critest binary reports ("" if it does not run).
kit_critest_version() { "$1" --version 2>/dev/null | sed -n 's/^critest version: //p'; }

kit_critest() {
	if [ -n "${CRITEST:-}" ]; then echo "$CRITEST"; return; fi
	local bin=$KIT_BIN/critest c src dir
	for c in "$bin" "$(command -v critest || true)"; do
		if [ -n "$c" ] && [ -x "$c" ] && [ "$(kit_critest_version "$c")" = "$KIT_CRITEST_VERSION" ]; then
			echo "$c"
			return
		fi
	done
	echo "kit: building $bin (critest $KIT_CRITEST_VERSION, go test -c of sigs.k8s.io/cri-tools/cmd/critest)" >&2
	dir=$(go mod download -json "sigs.k8s.io/cri-tools@$KIT_CRITEST_VERSION" | jq -r '.Dir // empty')
	[ -d "$dir" ] || { echo "kit: go mod download sigs.k8s.io/cri-tools@$KIT_CRITEST_VERSION failed" >&2; return 1; }
	# the module cache is read-only, and go test -c writes beside the package
	src=$(mktemp -d)
	cp -r "$dir/." "$src" && chmod -R u+w "$src"
	mkdir -p "$KIT_BIN"
	(cd "$src" && CGO_ENABLED=0 go test -vet=off -c -o "$bin" \
		-ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$KIT_CRITEST_VERSION" ./cmd/critest) >&2
	local rc=$?
	rm -rf "$src"
	[ $rc -eq 0 ] || return 1
	echo "$bin"
}
