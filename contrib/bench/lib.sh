# lib.sh: shared by the benchmark scripts here. Sourced, not run.
#
# start_daemon <side> <third octet> [serve flags...] starts a crijournal daemon on a node of
# its own: $base/<side> (root, socket cri.sock, CNI network with bridge cjb-<side> and
# subnet 10.250.<octet>.0/24) and a run root /run/cjb-XXXXXX, short enough for conmon's
# socket paths; it waits for the socket. cleanup (run on EXIT) stops every daemon
# started, by PID, and removes what they made.

bin="${CRIJOURNAL_BIN:-$(pwd)/bin/crijournal}"
# Pulls into a bench node need a signature policy, also where the machine has none.
policy="$(cd "$(dirname "${BASH_SOURCE[0]}")/../containers" && pwd)/policy.json"
[ -x "$bin" ] || { echo "$0: $bin not found: run make build first" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "$0: must run as root" >&2; exit 1; }

base="$(mktemp -d /tmp/cj-bench-XXXXXX)"
pids=()
sides=()
runs=() # run roots, under /run and short: conmon's state directory lives in them
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done; done
	for side in "${sides[@]}"; do
		ip link del "cjb-$side" 2>/dev/null || true
		rm -rf "/var/lib/cni/networks/cj-bench-$side"
	done
	for run in "${runs[@]}"; do rm -rf "$run"; done
	rm -rf "$base"
}
trap cleanup EXIT

start_daemon() {
	local side="$1" octet="$2"
	shift 2
	local dir="$base/$side" run
	run="$(mktemp -d /run/cjb-XXXXXX)"
	runs+=("$run")
	sides+=("$side")
	mkdir -p "$dir/cni"
	cat > "$dir/cni/10-bench.conflist" <<CONF
{"cniVersion": "1.0.0", "name": "cj-bench-$side", "plugins": [{"type": "bridge", "bridge": "cjb-$side",
 "isGateway": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.250.$octet.0/24"}]]}}]}
CONF
	"$bin" serve --config /dev/null --root "$dir/root" --run-root "$run" \
		--socket "$dir/cri.sock" --namespace-dir "$run/ns" --cni-conf-dir "$dir/cni" \
		--signature-policy "$policy" \
		--log-level warn "$@" >"$dir/daemon.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do [ -S "$dir/cri.sock" ] && return; sleep 0.1; done
	echo "$0: the $side daemon did not start:" >&2
	cat "$dir/daemon.log" >&2
	exit 1
}
