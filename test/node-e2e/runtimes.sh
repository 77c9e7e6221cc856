# shellcheck shell=bash
# shellcheck disable=SC2034 # SOCK and RUNTIME_* are read by run.sh, which sources this file
# runtimes.sh — sourced by run.sh: the container runtime the node suite runs against,
# started on private paths under $WORK in a cgroup of its own, and stopped by its PID.
#
#   RUNTIME=crijournal  bin/crijournal (the default)
#   RUNTIME=containerd  containerd 2.x, the anchor of the benchmarks: $CONTAINERD2_DIR's
#                       containerd and shim (`make bench-deps` builds 2.4.2 there), with a
#                       configuration of version 3 as contrib/bench/containerd.sh writes it,
#                       the project's runc (as crijournal's handlers run it), and the
#                       loopback registry as the mirror of the suite's registries (hosts.toml)
#
# After start_runtime: SOCK (the CRI endpoint's socket), RUNTIME_PID, RUNTIME_PROC and
# RUNTIME_PIDFILE (the process name and the PID file the density suite finds the runtime's
# cgroup by: --container-runtime-process-name, --container-runtime-pid-file), RUNTIME_LABEL.
#
# The cgroups (cg_setup): the runtime and the kubelet each in a cgroup of its own,
# $CG/runtime and $CG/kubelet, so that the density and resource-usage specs measure exactly
# their CPU and memory through the cAdvisor pod. The suite looks each process's cgroup up
# (test/e2e_node getContainer): on cgroup v1 its cpu and memory paths must be the same, and
# its name=systemd path is the one taken when that hierarchy is mounted. On cgroup v1, $CG
# is under this script's own memory cgroup, the same path in cpu, cpuacct, memory and
# name=systemd; on cgroup v2, under the root. The runtime enters $CG/runtime before it
# execs, and what it starts stays there unless the runtime moves it: crijournal moves each
# conmon into its pod's cgroup (as CRI-O's conmon_cgroup = "pod"); containerd's shims stay
# in containerd's cgroup (its default), so containerd's figures include its shims. The
# kubelet moves itself into $CG/kubelet (--kubelet-cgroups) and reports $CG/runtime as the
# runtime's (--runtime-cgroups).

CONTAINERD2_DIR=${CONTAINERD2_DIR:-/usr/local/libexec/crijournal/containerd-2.4.2}
CG=
CG_DIRS=() # the cgroup directories made, removed at the end (children first)

# cg_setup: make $CG/runtime and $CG/kubelet in every hierarchy the suite reads. CG_DIRS
# gets every directory of $CG/{runtime,kubelet} and of the path to it that does not exist
# yet, in every hierarchy (the kubelet makes its cgroup in all of them), deepest first.
cg_setup() {
	local own h c d p comp
	if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
		CG=/crij-node-e2e-$$
		CG_DIRS=("/sys/fs/cgroup$CG/runtime" "/sys/fs/cgroup$CG/kubelet" "/sys/fs/cgroup$CG")
		echo "+cpu +memory" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
		mkdir "/sys/fs/cgroup$CG"
		echo "+cpu +memory" >"/sys/fs/cgroup$CG/cgroup.subtree_control"
		mkdir "/sys/fs/cgroup$CG/runtime" "/sys/fs/cgroup$CG/kubelet"
		return
	fi
	own=$(sed -n 's/^[0-9]*:memory:\(.*\)$/\1/p' /proc/self/cgroup)
	CG=${own%/}/crij-node-e2e-$$
	for h in /sys/fs/cgroup/*/; do
		h=${h%/}
		[ -f "$h/cgroup.procs" ] || continue
		p=
		for comp in $(tr / ' ' <<<"$CG"); do
			p=$p/$comp
			[ -d "$h$p" ] || CG_DIRS=("$h$p" "${CG_DIRS[@]}")
		done
		CG_DIRS=("$h$CG/runtime" "$h$CG/kubelet" "${CG_DIRS[@]}")
	done
	for c in $CG_HIER; do
		for d in runtime kubelet; do mkdir -p "/sys/fs/cgroup/$c$CG/$d"; done
	done
}

# The cgroup v1 hierarchies a process of the suite's is looked up in: cpu and memory (which
# must name the same path), cpuacct (cAdvisor's CPU figures), and the name=systemd one when
# it is mounted, which the suite then takes instead (test/e2e_node getContainer).
CG_HIER="cpu cpuacct memory"
[ -f /sys/fs/cgroup/systemd/cgroup.procs ] && CG_HIER="$CG_HIER systemd"

# cg_procs NAME: the cgroup.procs files of $CG/NAME, one a line.
cg_procs() {
	local c
	if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
		echo "/sys/fs/cgroup$CG/$1/cgroup.procs"
		return
	fi
	for c in $CG_HIER; do echo "/sys/fs/cgroup/$c$CG/$1/cgroup.procs"; done
}

# cg_cleanup: remove the cgroups (what is left in them, the runtime's leftovers, was
# killed before).
cg_cleanup() {
	local d
	for d in "${CG_DIRS[@]}"; do
		[ -d "$d" ] || continue
		rmdir "$d" 2>/dev/null || echo "run.sh: cgroup $d left (not empty)" >&2
	done
}

# "${IN_RUNTIME_CGROUP[@]}" CMD... &: CMD, exec'd in $CG/runtime by a shell that entered
# it first (so that $! is CMD's PID, and CMD is in its cgroup from its first instruction).
# shellcheck disable=SC2016
IN_RUNTIME_CGROUP=(sh -c 'for f in $CG_PROCS; do echo $$ >"$f"; done; exec "$@"' sh)

# wait_socket SOCKET LOG: wait up to 10 s for SOCKET to answer the CRI.
wait_socket() {
	for _ in $(seq 100); do
		[ -S "$1" ] && crictl --runtime-endpoint "unix://$1" version >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "run.sh: the runtime did not start, see $2" >&2
	return 1
}

# start_runtime: start $RUNTIME (see above) on private paths under $WORK.
start_runtime() {
	cg_setup
	CG_PROCS=$(cg_procs runtime | tr '\n' ' ')
	export CG_PROCS
	case ${RUNTIME:-crijournal} in
	crijournal) start_crijournal ;;
	containerd) start_containerd ;;
	*) echo "run.sh: RUNTIME=$RUNTIME: want crijournal or containerd" >&2; return 1 ;;
	esac
}

# stop_runtime: remove the pods left, stop the runtime by its PID, and what it left.
stop_runtime() {
	[ -n "${RUNTIME_PID:-}" ] || { cg_cleanup; return 0; }
	# pods the suite left: their conmons, shims and containers would outlive the runtime
	crictl --config "$WORK/crictl.yaml" rmp -fa >/dev/null 2>&1
	kill -TERM "$RUNTIME_PID" 2>/dev/null
	for _ in $(seq 100); do kill -0 "$RUNTIME_PID" 2>/dev/null || break; sleep 0.2; done
	kill -KILL "$RUNTIME_PID" 2>/dev/null
	case ${RUNTIME:-crijournal} in
	crijournal) stop_crijournal ;;
	containerd) stop_containerd ;;
	esac
	cg_cleanup
}

# The mirrors of the names the suite does not map through KUBE_TEST_REPO_LIST (hard-coded
# references: the cAdvisor pod's gcr.io/cadvisor/cadvisor, docker.io, registry.k8s.io).
MIRRORED="registry.k8s.io gcr.io k8s.gcr.io docker.io"

start_crijournal() {
	SOCK=$WORK/run/crijournal.sock
	mkdir -p "$WORK/cni" "$WORK/registries.conf.d" "$WORK/run"
	jq --arg d "$WORK/cni-ipam" '.name = "crij-node-e2e" | .plugins[0].bridge = "cnie2e0" |
		.plugins[0].ipam.ranges = [[{subnet: "10.100.0.0/24"}]] | .plugins[0].ipam.dataDir = $d' \
		"$ROOT/contrib/cni/10-crijournal-bridge.conflist" >"$WORK/cni/10-node-e2e.conflist"
	cat >"$WORK/registries.conf" <<REG
[[registry]]
location = "$REG_ADDR"
insecure = true
REG
	{
		cat <<CFG
root = "$WORK/root"
run_root = "$WORK/run"
socket = "$SOCK"
namespace_dir = "$WORK/run/ns"
cni_conf_dir = "$WORK/cni"
cni_cache_dir = "$WORK/cni-cache"
registries_conf = "$WORK/registries.conf"
registries_conf_dir = "$WORK/registries.conf.d"
signature_policy = "$ROOT/contrib/containers/policy.json"
cgroup_manager = "cgroupfs"
enable_nri = false

# the RuntimeClass handler the suite's RuntimeClass and PodOverhead specs name (upstream's
# node e2e jobs configure their runtime with it, as runc)
[runtimes.test-handler]
CFG
		for h in $MIRRORED; do
			printf '\n[[registries]]\nprefix = "%s"\nlocation = "%s"\ninsecure = true\n' "$h" "$REG_ADDR"
		done
	} >"$WORK/crijournal.toml"
	RUNTIME_PIDFILE=$WORK/run/crijournal.pid
	RUNTIME_PROC=crijournal
	"${IN_RUNTIME_CGROUP[@]}" "$BIN/crijournal" serve --config "$WORK/crijournal.toml" --pid-file "$RUNTIME_PIDFILE" \
		>"$RESULTS/crijournal.log" 2>&1 &
	RUNTIME_PID=$!
	wait_socket "$SOCK" "$RESULTS/crijournal.log"
	for _ in $(seq 50); do [ -s "$RUNTIME_PIDFILE" ] && break; sleep 0.1; done
	[ "$(cat "$RUNTIME_PIDFILE" 2>/dev/null)" = "$RUNTIME_PID" ] || {
		echo "run.sh: $RUNTIME_PIDFILE does not hold the daemon's PID $RUNTIME_PID" >&2
		return 1
	}
	RUNTIME_LABEL=$("$BIN/crijournal" --version | head -n 1)
}

stop_crijournal() {
	# what the suite's pods left on the node, as the daemon's own leak check sees it
	# (non-zero: something leaked; the list is in leaks.txt)
	if ! "$BIN/crijournal" inspect --config "$WORK/crijournal.toml" --leaks >"$RESULTS/leaks.txt" 2>&1; then
		echo "run.sh: the node holds what no journal record owns: see $RESULTS/leaks.txt" >&2
	fi
}

# containerd: root under $WORK, state (and the shims' sockets) under a short run root.
CTD_RUN=
start_containerd() {
	local c cnibin=/usr/lib/cni runc=/usr/local/libexec/crijournal/runc h
	for c in containerd containerd-shim-runc-v2; do
		[ -x "$CONTAINERD2_DIR/$c" ] || { echo "run.sh: no $CONTAINERD2_DIR/$c: make bench-deps" >&2; return 1; }
	done
	[ -x /opt/cni/bin/bridge ] && cnibin=/opt/cni/bin
	[ -x "$runc" ] || runc=$(command -v runc)
	CTD_RUN=$(mktemp -d /run/cjn-XXXXXX)
	SOCK=$CTD_RUN/containerd.sock
	local ctd=$WORK/containerd
	mkdir -p "$ctd/net.d" "$ctd/certs.d"
	jq --arg d "$ctd/cni-ipam" '.name = "crij-node-e2e" | .plugins[0].bridge = "cnie2e0" |
		.plugins[0].ipam.ranges = [[{subnet: "10.100.0.0/24"}]] | .plugins[0].ipam.dataDir = $d' \
		"$ROOT/contrib/cni/10-crijournal-bridge.conflist" >"$ctd/net.d/10-node-e2e.conflist"
	for h in "$REG_ADDR" $MIRRORED; do
		mkdir -p "$ctd/certs.d/$h"
		printf 'server = "http://%s"\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n  skip_verify = true\n' \
			"$REG_ADDR" "$REG_ADDR" >"$ctd/certs.d/$h/hosts.toml"
	done
	# shellcheck source=../../contrib/bench/containerd-config.sh
	. "$ROOT/contrib/bench/containerd-config.sh"
	containerd_v3_config "$ctd/config.toml" "$ctd" "$CTD_RUN" "$SOCK" "$cnibin" "$runc" "$REG_ADDR/pause:3.10.2" "$ctd/certs.d" test-handler
	RUNTIME_PIDFILE=$CTD_RUN/containerd.pid
	RUNTIME_PROC=containerd
	# containerd looks its shim up in PATH first: its own release's
	PATH="$CONTAINERD2_DIR:$PATH" "${IN_RUNTIME_CGROUP[@]}" "$CONTAINERD2_DIR/containerd" --config "$ctd/config.toml" \
		>"$RESULTS/containerd.log" 2>&1 &
	RUNTIME_PID=$!
	# containerd writes no PID file: this script does, as the suite reads it (bare digits)
	printf %s "$RUNTIME_PID" >"$RUNTIME_PIDFILE"
	wait_socket "$SOCK" "$RESULTS/containerd.log"
	RUNTIME_LABEL="containerd $("$CONTAINERD2_DIR/containerd" --version | awk '{print $3}')"
}

# stop_containerd: what containerd leaves by design: its shims (each wrote its PID in its
# task's bundle), their containers, mounts under its directories.
stop_containerd() {
	local f c
	for f in "$CTD_RUN"/state/io.containerd.runtime.v2.task/*/*/shim.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
	done
	if [ -d "$CTD_RUN/runc/k8s.io" ]; then
		for c in $(/usr/local/libexec/crijournal/runc --root "$CTD_RUN/runc/k8s.io" list -q 2>/dev/null); do
			/usr/local/libexec/crijournal/runc --root "$CTD_RUN/runc/k8s.io" delete --force "$c" 2>/dev/null
		done
	fi
	grep -E " ($WORK/containerd|$CTD_RUN)/" /proc/mounts | awk '{print $2}' | sort -r |
		while read -r m; do umount -l "$m"; done
	# what is left in the runtime's cgroup (a shim that outlived its PID file)
	cat "/sys/fs/cgroup/memory$CG/runtime/cgroup.procs" "/sys/fs/cgroup$CG/runtime/cgroup.procs" 2>/dev/null |
		while read -r p; do kill -KILL "$p" 2>/dev/null; done
	sleep 0.5
	rm -rf "$CTD_RUN"
}
