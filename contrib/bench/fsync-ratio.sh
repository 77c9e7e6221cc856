#!/bin/bash
# fsync-ratio.sh: the journal's fsync cost, as a ratio measured in one run.
#
# Starts two crijournal daemons side by side, identical but for journal_no_sync (each
# with its own directories, socket, bridge and subnet), runs `crijournal bench
# --compare-endpoint` against them (the workload alternates between the two), then stops
# them by PID and removes what they made. Run as root from the repository, after
# `make build`. Arguments are passed to `crijournal bench` (default: -n 50 -c 8 --rounds 5).
set -euo pipefail

bin="${CRIJOURNAL_BIN:-$(pwd)/bin/crijournal}"
[ -x "$bin" ] || { echo "fsync-ratio: $bin not found: run make build first" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "fsync-ratio: must run as root" >&2; exit 1; }
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-n 50 -c 8 --rounds 5)

base="$(mktemp -d /tmp/cj-fsync-XXXXXX)"
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done; done
	for side in sync nosync; do
		ip link del "cjb-$side" 2>/dev/null || true
		rm -rf "/var/lib/cni/networks/cj-bench-$side"
	done
	rm -rf "$base"
}
trap cleanup EXIT

start() { # start <side> <third octet> [extra serve flags]
	local side="$1" octet="$2"
	shift 2
	local dir="$base/$side"
	mkdir -p "$dir/cni"
	cat > "$dir/cni/10-bench.conflist" <<CONF
{"cniVersion": "1.0.0", "name": "cj-bench-$side", "plugins": [{"type": "bridge", "bridge": "cjb-$side",
 "isGateway": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.250.$octet.0/24"}]]}}]}
CONF
	"$bin" serve --config /dev/null --root "$dir/root" --run-root "$dir/run" \
		--socket "$dir/run/cri.sock" --namespace-dir "$dir/run/ns" --cni-conf-dir "$dir/cni" \
		--log-level warn "$@" >"$dir/daemon.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do [ -S "$dir/run/cri.sock" ] && return; sleep 0.1; done
	echo "fsync-ratio: the $side daemon did not start:" >&2
	cat "$dir/daemon.log" >&2
	exit 1
}

start sync 1
start nosync 2 --journal-no-sync
"$bin" bench --endpoint "unix://$base/sync/run/cri.sock" \
	--compare-endpoint "unix://$base/nosync/run/cri.sock" "${args[@]}"
