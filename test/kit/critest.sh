#!/usr/bin/env bash
# critest.sh [BINARY [OUTDIR]] [critest flags...]: `make critest`. The CRI conformance suite
# (critest v1.37.0) against a crijournal binary (default bin/crijournal, with its pause
# programs beside it), everything on private paths and stopped at the end. As root.
#
#   1. the stand-in images (images.sh, cached in $KIT_IMAGES, /var/tmp/crij-images) and
#      critest (bin/critest, built once: kit_critest in lib.sh);
#   2. the kit's registry on a free loopback port (registry.sh), filled with them;
#   3. the daemon on a directory of its own under /tmp: root, run root, socket, NRI socket,
#      CNI network (bridge + host-local + portmap, a free 10.77.N.0/24), registries.conf,
#      and mirrors of registry.k8s.io, gcr.io, k8s.gcr.io and docker.io to the registry;
#      the caller's CRIJOURNAL_* variables are dropped (a wrapper may set its own);
#   4. run-critest.sh with -nri-socket (the NRI specs run), then the pods critest left are
#      removed, the daemon is stopped by PID, `crijournal inspect --leaks` checks the node,
#      and the registry, bridge and directory go.
#
# OUTDIR (default _output/critest/<time>) gets summary.txt (the counts, failures, skip
# reasons), critest's report.json and output, the daemon's log and configuration,
# registry.log and leaks.txt. Exits with critest's status (one failure is expected: the
# digest-pinned image, which no local registry can serve).
#   test/kit/critest.sh
#   test/kit/critest.sh bin/crijournal /tmp/out --ginkgo.focus='Image Manager'
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BIN=$KIT_ROOT/bin/crijournal
OUT=$KIT_ROOT/_output/critest/$(date -u +%Y%m%dT%H%M%SZ)
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then BIN=$1; shift; fi
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then OUT=$1; shift; fi

[ "$(id -u)" -eq 0 ] || { echo "critest.sh: must run as root" >&2; exit 1; }
[ -x "$BIN" ] || { echo "critest.sh: no $BIN: run make build first" >&2; exit 1; }
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
for c in crictl jq ip; do
	command -v "$c" >/dev/null || { echo "critest.sh: no $c (make deps; apt-get install jq)" >&2; exit 1; }
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# 1. images and critest, before anything runs that would need stopping
"$KIT_DIR/images.sh" "$KIT_IMAGES" || exit 1
kit_critest >/dev/null || exit 1

# short: conmon's state directory, $W/run/oci-runc, stays under it (layout.MaxStateDirLen)
W=$(mktemp -d /tmp/cjc.XXXXXX)
# searchable by others: user-namespaced containers reach their root filesystems below it
chmod 0711 "$W"
SOCK=$W/crijournal.sock
BRIDGE=cjc-${W##*.}
export REG_ADDR=127.0.0.1:0 REG_RUN=$W/registry
DAEMON_PID=

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	local rc=$? state_dirs=() d
	set +e
	if [ -n "$DAEMON_PID" ]; then
		# the pods critest left: their conmons and containers would outlive the daemon
		crictl --runtime-endpoint "unix://$SOCK" --image-endpoint "unix://$SOCK" --timeout 60s rmp -fa >/dev/null 2>&1
		kill -TERM "$DAEMON_PID" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$DAEMON_PID" 2>/dev/null
		wait "$DAEMON_PID" 2>/dev/null
		# node-wide: on a machine shared with other daemons, their cgroups are listed too
		if "$BIN" inspect --config "$W/crijournal.toml" --leaks >"$OUT/leaks.txt" 2>&1; then
			echo "leaks: none (crijournal inspect --leaks)"
		else
			echo "leaks: $(head -n 1 "$OUT/leaks.txt" | cut -c1-60)... node-wide (other daemons' count too): see $OUT/leaks.txt" >&2
		fi
		# conmon's state directories, under /run when $W/run/... is too long for its socket
		# paths: the daemon says where (layout.StateDirFor)
		mapfile -t state_dirs < <("$BIN" inspect --config "$W/crijournal.toml" --paths 2>/dev/null |
			jq -r '.handlers[].conmon_state' 2>/dev/null)
	fi
	"$KIT_DIR/registry.sh" stop >/dev/null 2>&1
	ip link del "$BRIDGE" 2>/dev/null
	if grep -q " $W/" /proc/self/mountinfo; then
		echo "critest.sh: mounts left under $W (kept)" >&2
	else
		rm -rf "$W"
		for d in "${state_dirs[@]}"; do
			case "$d" in /run/cjo-*) rm -rf "$d" ;; esac
		done
	fi
	echo "critest: results in $OUT"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 2. the registry ----------------------------------------------------------------------
"$KIT_DIR/registry.sh" start "$KIT_IMAGES" >"$OUT/registry.log" 2>&1 ||
	{ echo "critest.sh: the registry did not start:" >&2; tail -20 "$OUT/registry.log" >&2; exit 1; }
reg=$("$KIT_DIR/registry.sh" addr) || exit 1
echo "critest: registry $reg ($(grep -c '^pushed ' "$OUT/registry.log") references)"

# 3. the daemon ------------------------------------------------------------------------
subnet=
for n in $(seq 0 255); do
	if ! ip -4 route show | grep -q "^10\.77\.$n\." && ! ip -4 addr show | grep -q " 10\.77\.$n\."; then
		subnet=10.77.$n.0/24
		break
	fi
done
[ -n "$subnet" ] || { echo "critest.sh: no free 10.77.N.0/24 for the pod network" >&2; exit 1; }
mkdir -p "$W/cni" "$W/nri-plugins" "$W/nri-conf" "$W/registries.conf.d"
jq --arg b "$BRIDGE" --arg s "$subnet" --arg d "$W/ipam" '.name = "crij-critest" | .plugins[0].bridge = $b |
	.plugins[0].ipam.ranges = [[{subnet: $s}]] | .plugins[0].ipam.dataDir = $d' \
	"$KIT_ROOT/contrib/cni/10-crijournal-bridge.conflist" >"$W/cni/10-critest.conflist"
: >"$W/registries.conf"
{
	cat <<CFG
root = "$W/root"
run_root = "$W/run"
socket = "$SOCK"
namespace_dir = "$W/run/ns"
cni_conf_dir = "$W/cni"
cni_cache_dir = "$W/cni-cache"
registries_conf = "$W/registries.conf"
registries_conf_dir = "$W/registries.conf.d"
signature_policy = "$KIT_ROOT/contrib/containers/policy.json"
enable_nri = true
nri_listen = "$W/nri.sock"
nri_plugin_dir = "$W/nri-plugins"
nri_plugin_config_dir = "$W/nri-conf"
CFG
	for h in registry.k8s.io gcr.io k8s.gcr.io docker.io; do
		printf '\n[[registries]]\nprefix = "%s"\nlocation = "%s"\ninsecure = true\n' "$h" "$reg"
	done
} >"$W/crijournal.toml"
cp "$W/crijournal.toml" "$W/cni/10-critest.conflist" "$OUT/"
mapfile -t unset < <(env | sed -n 's/^\(CRIJOURNAL_[A-Za-z0-9_]*\)=.*/-u\n\1/p')
env "${unset[@]}" "$BIN" serve --config "$W/crijournal.toml" >"$OUT/daemon.log" 2>&1 </dev/null &
DAEMON_PID=$!
for _ in $(seq 300); do
	crictl --runtime-endpoint "unix://$SOCK" --timeout 5s version >/dev/null 2>&1 && break
	kill -0 "$DAEMON_PID" 2>/dev/null || { echo "critest.sh: the daemon exited:" >&2; tail -20 "$OUT/daemon.log" >&2; DAEMON_PID=; exit 1; }
	sleep 0.2
done
crictl --runtime-endpoint "unix://$SOCK" --timeout 5s version >/dev/null 2>&1 ||
	{ echo "critest.sh: the daemon does not answer on $SOCK (see $OUT/daemon.log)" >&2; exit 1; }
echo "critest: daemon $DAEMON_PID ($BIN) on $SOCK, pods on $BRIDGE $subnet; critest runs (100-250 s on 2 cores)"

# 4. critest ---------------------------------------------------------------------------
"$KIT_DIR/run-critest.sh" "unix://$SOCK" "$OUT" -nri-socket "$W/nri.sock" "$@" | tee "$OUT/summary.txt"
exit "${PIPESTATUS[0]}"
