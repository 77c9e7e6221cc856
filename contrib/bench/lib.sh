# lib.sh: shared by the benchmark scripts here. Sourced, not run.
#
# start_daemon <side> <third octet> [serve flags...] starts a crijournal daemon on a node of
# its own: $base/<side> (root, socket cri.sock, CNI network with bridge cjb-<side> and
# subnet 10.250.<octet>.0/24, or $CNI_SUBNET) and a run root /run/cjb-XXXXXX, short enough
# for conmon's socket paths; it waits for the socket. The daemon reads $DAEMON_CONFIG
# (default none). cleanup (run on EXIT) stops every daemon started, by PID, and removes
# what they made; then it runs the commands in $cleanups (other daemons' cleanups).
#
# mirror_config <file> writes a daemon configuration whose registries are mirrored by the
# loopback registry $REG_ADDR. Without REG_ADDR it first starts the project's registry
# (test/kit/registry.sh: crane on a free 127.0.0.1 port, filled with the stand-in images of
# test/kit/images.sh, built into $KIT_IMAGES when missing) for this run; cleanup stops it.
# pull <side> <image> pulls an image into a side's daemon with crictl.
#
# $bin is the daemon (CRIJOURNAL_BIN, default bin/crijournal), $bench the benchmark program
# (CRIJOURNAL_BENCH_BIN, default crijournal-bench beside the daemon): both from `make build`.
#
# RUN_TMPFS=1 runs the script in a mount namespace of its own whose /run is a tmpfs, as on a
# node booted by systemd, where this machine mounts /run from its root disk: every run root
# (the daemons', containerd's, the floor's /run/cjfloor-*) is then in memory. Graph roots
# and CNI's IPAM directories stay on the disk. Nothing outside the script sees that /run.

if [ "${RUN_TMPFS:-}" = 1 ] && [ -z "${CJB_RUN_TMPFS:-}" ]; then
	# The script again, as its own child in a private mount namespace; positional
	# parameters are the sourcing script's.
	exec unshare --mount --propagation private env CJB_RUN_TMPFS=1 bash -c \
		'mount -t tmpfs -o mode=0755 cjb-run /run && mkdir -p /run/lock && exec bash "$@"' bash "$0" "$@"
fi

bin="${CRIJOURNAL_BIN:-$(pwd)/bin/crijournal}"
bench="${CRIJOURNAL_BENCH_BIN:-$(dirname "$bin")/crijournal-bench}"
# Pulls into a bench node need a signature policy, also where the machine has none.
policy="$(cd "$(dirname "${BASH_SOURCE[0]}")/../containers" && pwd)/policy.json"
[ -x "$bin" ] || { echo "$0: $bin not found: run make build first" >&2; exit 1; }
[ -x "$bench" ] || { echo "$0: $bench not found: run make build first" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "$0: must run as root" >&2; exit 1; }

base="$(mktemp -d /tmp/cj-bench-XXXXXX)"
pids=()
sides=()
runs=() # run roots, under /run and short: conmon's state directory lives in them
# rmp <endpoint> removes every pod left on a daemon (a bench run that was interrupted
# before its own teardown), so that no container outlives its daemon.
rmp() {
	crictl --runtime-endpoint "$1" --image-endpoint "$1" --timeout 60s rmp -af >/dev/null 2>&1 || true
}
cleanup() {
	for side in "${sides[@]}"; do [ -S "$base/$side/cri.sock" ] && rmp "unix://$base/$side/cri.sock"; done
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done; done
	for side in "${sides[@]}"; do
		ip link del "cjb-$side" 2>/dev/null || true
		rm -rf "/var/lib/cni/networks/cj-bench-$side"
	done
	for run in "${runs[@]}"; do rm -rf "$run"; done
	for c in "${cleanups[@]}"; do "$c" || true; done
	rm -rf "$base"
}
cleanups=()
kit="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../test/kit" && pwd)"

# stop_registry stops the registry start_registry started (cleanup runs it).
stop_registry() { REG_RUN="$base/registry" "$kit/registry.sh" stop >/dev/null; }

# start_registry starts the kit's registry for this run, unless REG_ADDR names one already.
start_registry() {
	[ -z "${REG_ADDR:-}" ] || return 0
	"$kit/images.sh" >&2
	cleanups+=(stop_registry)
	REG_ADDR=127.0.0.1:0 REG_RUN="$base/registry" "$kit/registry.sh" start >"$base/registry.log" 2>&1 || {
		echo "$0: the kit's registry did not start:" >&2
		tail -n 20 "$base/registry.log" >&2
		exit 1
	}
	REG_ADDR="$(REG_RUN="$base/registry" "$kit/registry.sh" addr)"
	echo "registry: $REG_ADDR (test/kit/registry.sh)" >&2
}

mirror_config() {
	start_registry
	for h in registry.k8s.io gcr.io k8s.gcr.io docker.io; do
		printf '[[registries]]\nprefix = "%s"\nlocation = "%s"\ninsecure = true\n' "$h" "$REG_ADDR"
	done >"$1"
}

pull() {
	crictl --runtime-endpoint "unix://$base/$1/cri.sock" --image-endpoint "unix://$base/$1/cri.sock" pull "$2" >/dev/null
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
 "isGateway": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "${CNI_SUBNET:-10.250.$octet.0/24}"}]]}}]}
CONF
	"$bin" serve --config "${DAEMON_CONFIG:-/dev/null}" --root "$dir/root" --run-root "$run" \
		--socket "$dir/cri.sock" --namespace-dir "$run/ns" --cni-conf-dir "$dir/cni" \
		--signature-policy "$policy" \
		--log-level warn "$@" >"$dir/daemon.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do [ -S "$dir/cri.sock" ] && return; sleep 0.1; done
	echo "$0: the $side daemon did not start:" >&2
	cat "$dir/daemon.log" >&2
	exit 1
}
