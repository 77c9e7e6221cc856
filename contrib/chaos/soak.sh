#!/bin/bash
# soak.sh: the chaos soak. A crijournal daemon on a node of its own serves `crijournal-bench`,
# which brings PODS pods up the way a kubelet does (a request that takes longer than
# CLIENT_TIMEOUT is abandoned and retried with the same name), then stops and removes them;
# all the while the daemon is SIGKILLed at random every KILL_MIN..KILL_MAX seconds and
# started again at once, as a service manager would. At the end every pod must have
# converged (come up) or been removed cleanly, and the node must hold nothing of them, as
# `crijournal inspect --leaks` sees it: namespace pins and mounts, the pods' files, host-local
# IP files, veths, libcni cache entries, storage and runc containers, conmons, journal records. It prints its figures and exits non-zero when
# something leaked or did not converge.
#
# Run as root from the repository after `make build` (not part of `make test`):
#   contrib/chaos/soak.sh
# Settings (environment):
#   PODS=100 CONCURRENCY=10 CLIENT_TIMEOUT=2s   the workload
#   KILL_MIN=2 KILL_MAX=6                        seconds between kills
#   MAX_KILLS=100 MAX_SECONDS=1200               bounds of the run (kills; seconds, overall)
#   SLOW_CNI=2.5                                 seconds the CNI plugin sleeps (ADD and DEL): more than
#                                                CLIENT_TIMEOUT, so first attempts time out and are
#                                                cached for their retry, and kills land mid-ADD
#   REMOVAL_KILLS=5                              kills during the removal rounds after bench
#   IMAGE=                                       with an image, a container is made and started in
#                                                every pod too (pulled first; REGISTRY names an
#                                                insecure registry to use, e.g. 127.0.0.1:5000)
#   KEEP=1                                       keep the node directory for inspection
# Everything it makes is its own: a directory $TMPDIR/cj-chaos-XXXXXX (TMPDIR default /tmp; root, socket, CNI
# configuration, IP and CNI cache directories, logs), a run root /run/cjc-XXXXXX, a bridge
# cjc<random> with a random 10.251.x.0/24; the daemon and bench are stopped by PID.
set -euo pipefail

PODS="${PODS:-100}"
CONCURRENCY="${CONCURRENCY:-10}"
CLIENT_TIMEOUT="${CLIENT_TIMEOUT:-2s}"
KILL_MIN="${KILL_MIN:-2}"
KILL_MAX="${KILL_MAX:-6}"
MAX_KILLS="${MAX_KILLS:-100}"
MAX_SECONDS="${MAX_SECONDS:-1200}"
SLOW_CNI="${SLOW_CNI:-2.5}"
REMOVAL_KILLS="${REMOVAL_KILLS:-5}"
IMAGE="${IMAGE:-}"
REGISTRY="${REGISTRY:-}"
CACHE_TTL="${CACHE_TTL:-20s}"
CNI_DIR="${CNI_DIR:-/usr/lib/cni}"

bin="${CRIJOURNAL_BIN:-$(pwd)/bin/crijournal}"
bench="${CRIJOURNAL_BENCH_BIN:-$(dirname "$bin")/crijournal-bench}"
# Pulls need a signature policy, also where the machine has none: the repository's.
policy="$(cd "$(dirname "${BASH_SOURCE[0]}")/../containers" && pwd)/policy.json"
[ -x "$bin" ] || { echo "$0: $bin not found: run make build first" >&2; exit 2; }
[ -x "$bench" ] || { echo "$0: $bench not found: run make build first" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "$0: must run as root" >&2; exit 2; }
for tool in crictl jq runc ip; do
	command -v "$tool" >/dev/null || { echo "$0: $tool is missing" >&2; exit 2; }
done
[ -x "$CNI_DIR/bridge" ] || { echo "$0: no CNI plugins in $CNI_DIR (set CNI_DIR)" >&2; exit 2; }

# The runc the daemon's handler runs: the project's when make deps installed it.
runc_bin=runc
[ -x /usr/local/libexec/crijournal/runc ] && runc_bin=/usr/local/libexec/crijournal/runc

started=$(date +%s)
elapsed() { echo $(($(date +%s) - started)); }
out_of_time() { [ "$(elapsed)" -ge "$MAX_SECONDS" ]; }
log() { echo "soak [$(elapsed)s]: $*" >&2; }

base="$(mktemp -d "${TMPDIR:-/tmp}/cj-chaos-XXXXXX")"
run="$(mktemp -d /run/cjc-XXXXXX)"
suffix="$(head -c3 /dev/urandom | od -An -tx1 | tr -d ' \n')"
bridge="cjc$suffix"
octet=$((RANDOM % 250 + 1))
network="cj-chaos-$suffix"
sock="$base/cri.sock"
cfg="$base/crijournal.toml"
prefix="chaos-$suffix"
daemon_pid=""
bench_pid=""

# our_processes lists the PIDs of processes whose command line names the run root:
# conmons, runtime processes (the daemon's own names only its configuration file).
our_processes() {
	local p cmd
	for p in /proc/[0-9]*; do
		cmd="$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null)" || continue
		case "$cmd" in *"$run"*) echo "${p#/proc/}" ;; esac
	done
}

stop_pid() { # stop_pid PID SIGNAL: signal one of our processes and wait (bounded) for it
	local pid="$1" sig="$2"
	[ -n "$pid" ] || return 0
	kill "-$sig" "$pid" 2>/dev/null || return 0
	for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	stop_pid "$bench_pid" TERM
	stop_pid "$daemon_pid" TERM
	# What a failed run left: containers (conmon, runc), pinned namespaces, mounts, the
	# bridge. The leak check has already reported it.
	for pid in $(our_processes); do kill -KILL "$pid" 2>/dev/null || true; done
	for id in $("$runc_bin" --root "$run/runc" list -q 2>/dev/null); do
		"$runc_bin" --root "$run/runc" delete --force "$id" >/dev/null 2>&1 || true
	done
	awk -v r="$run" -v b="$base" 'index($5, r) == 1 || index($5, b) == 1 {print $5}' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" 2>/dev/null || true; done
	ip link del "$bridge" 2>/dev/null || true
	rm -rf "$run"
	if [ -n "${KEEP:-}" ]; then
		echo "soak: node kept in $base" >&2
	else
		rm -rf "$base"
	fi
}
trap cleanup EXIT

# --- the node ---------------------------------------------------------------
mkdir -p "$base/net.d" "$base/plugins" "$base/ipam" "$base/cni-cache" "$base/root"
cat > "$base/net.d/10-chaos.conflist" <<CONF
{"cniVersion": "1.0.0", "name": "$network", "plugins": [{"type": "bridge", "bridge": "$bridge",
 "isGateway": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.251.$octet.0/24"}]],
 "dataDir": "$base/ipam"}}]}
CONF
# The bridge plugin, slowed so that kills land while it runs (exec: it still gets the
# daemon's parent-death signal).
cat > "$base/plugins/bridge" <<WRAP
#!/bin/sh
[ "\$CNI_COMMAND" = VERSION ] || sleep $SLOW_CNI
exec $CNI_DIR/bridge "\$@"
WRAP
chmod +x "$base/plugins/bridge"
cat > "$cfg" <<TOML
# crijournal chaos soak
root = "$base/root"
run_root = "$run"
socket = "$sock"
namespace_dir = "$run/ns"
cni_conf_dir = "$base/net.d"
cni_plugin_dirs = ["$base/plugins", "$CNI_DIR"]
cni_cache_dir = "$base/cni-cache"
cache_ttl = "$CACHE_TTL"
cache_sweep_interval = "1s"
undo_retry_min = "200ms"
undo_retry_max = "2s"
storage_driver = "vfs"
signature_policy = "$policy"
log_level = "info"

[runtimes.runc]
root = "$run/runc"
TOML
if [ -n "$REGISTRY" ]; then
	printf '\n[[registries]]\nprefix = "%s"\nlocation = "%s"\ninsecure = true\n' "$REGISTRY" "$REGISTRY" >> "$cfg"
fi

start_daemon() {
	"$bin" serve --config "$cfg" >>"$base/daemon.log" 2>&1 &
	daemon_pid=$!
	for _ in $(seq 300); do
		if crictl --runtime-endpoint "unix://$sock" --timeout 2s version >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$daemon_pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "soak: the daemon did not start; its log:" >&2
	tail -n 40 "$base/daemon.log" >&2
	exit 1
}

cri() { crictl --runtime-endpoint "unix://$sock" --image-endpoint "unix://$sock" --timeout 30s "$@"; }

start_daemon
log "node $base, run root $run, bridge $bridge, 10.251.$octet.0/24; daemon pid $daemon_pid"
if [ -n "$IMAGE" ]; then
	cri pull "$IMAGE" >/dev/null
	log "pulled $IMAGE"
fi

# --- the workload under kills --------------------------------------------------
bench_args=(--endpoint "unix://$sock" -n "$PODS" -c "$CONCURRENCY" --client-timeout "$CLIENT_TIMEOUT"
	--max-retries 200 --prefix "$prefix" --json)
[ -z "$IMAGE" ] || bench_args+=(--image "$IMAGE")
"$bench" "${bench_args[@]}" >"$base/bench.json" 2>"$base/bench.err" &
bench_pid=$!

kills=0
restarts_by_itself=0
while kill -0 "$bench_pid" 2>/dev/null; do
	if [ "$kills" -ge "$MAX_KILLS" ] || out_of_time; then
		break
	fi
	pause_ms=$((KILL_MIN * 1000 + RANDOM % ((KILL_MAX - KILL_MIN) * 1000 + 1)))
	sleep "$(printf '%d.%03d' $((pause_ms / 1000)) $((pause_ms % 1000)))"
	kill -0 "$bench_pid" 2>/dev/null || break
	if ! kill -0 "$daemon_pid" 2>/dev/null; then
		wait "$daemon_pid" 2>/dev/null || true
		restarts_by_itself=$((restarts_by_itself + 1))
		log "the daemon had exited by itself; starting it again"
	else
		kill -KILL "$daemon_pid"
		wait "$daemon_pid" 2>/dev/null || true
		kills=$((kills + 1))
	fi
	echo "=== soak: SIGKILL $kills at $(elapsed)s ===" >>"$base/daemon.log"
	start_daemon
done
log "$kills kills; waiting for bench"
bench_rc=0
for _ in $(seq $((MAX_SECONDS * 10))); do
	kill -0 "$bench_pid" 2>/dev/null || break
	out_of_time && break
	sleep 0.1
done
if kill -0 "$bench_pid" 2>/dev/null; then
	log "bench still running at the time limit: stopping it"
	stop_pid "$bench_pid" TERM
fi
wait "$bench_pid" 2>/dev/null || bench_rc=$?
bench_pid=""
kill -0 "$daemon_pid" 2>/dev/null || { wait "$daemon_pid" 2>/dev/null || true; start_daemon; }

# --- removal under kills: what bench's teardown could not remove (a kill cut it) ----------
# Rounds of stopp+rmp of every pod left, CONCURRENCY at a time; during each of the first
# REMOVAL_KILLS rounds the daemon is killed at a random moment and started again.
left_over="$(cri pods -q --label "io.crijournal.bench=$prefix" 2>/dev/null | wc -l || true)"
removal_kills=0
rounds=0
remove_all() {
	# shellcheck disable=SC2016 # $1 and $2 are the inner shell's arguments
	printf '%s\n' "$@" | xargs -r -P "$CONCURRENCY" -I{} sh -c \
		'crictl --runtime-endpoint "unix://$1" --timeout 30s stopp "$2" && crictl --runtime-endpoint "unix://$1" --timeout 30s rmp "$2"' \
		_ "$sock" {} >/dev/null 2>&1
}
while [ "$rounds" -lt 30 ] && ! out_of_time; do
	ids="$(cri pods -q --label "io.crijournal.bench=$prefix" 2>/dev/null || true)"
	[ -n "$ids" ] || break
	rounds=$((rounds + 1))
	# shellcheck disable=SC2086
	remove_all $ids &
	remove_pid=$!
	if [ "$removal_kills" -lt "$REMOVAL_KILLS" ] && [ "$kills" -lt "$MAX_KILLS" ]; then
		sleep "0.$((RANDOM % 9 + 1))"
		kill -KILL "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
		kills=$((kills + 1))
		removal_kills=$((removal_kills + 1))
		echo "=== soak: SIGKILL $kills (removal) at $(elapsed)s ===" >>"$base/daemon.log"
		start_daemon
	fi
	wait "$remove_pid" || true
done
# Cached creations nobody claimed expire after cache_ttl; failed undos are retried: wait
# until the journal holds nothing (bounded).
records=-1
for _ in $(seq 600); do
	records="$("$bin" inspect --config "$cfg" --json 2>/dev/null | jq 'length' 2>/dev/null || echo -1)"
	[ "$records" = 0 ] && break
	out_of_time && break
	sleep 0.5
done
stop_pid "$daemon_pid" TERM
daemon_pid=""

# --- the leak check -----------------------------------------------------------
# crijournal inspect --leaks looks at the node with the daemon's own paths: namespace pins
# and the mounts below its directories, the pods' files, host-local IP files, veths on the
# network's bridge, libcni cache entries, storage containers (graph and run roots) and
# layer directories, runc containers, conmon processes and state, journal records. With
# every pod removed, what a record still holds is a leak as well. Its cgroups are left
# out: the pods have no cgroup_parent, so theirs are in the node's shared /crijournal.
leaks=()
inspect_json="$("$bin" inspect --config "$cfg" --leaks --json 2>"$base/inspect-leaks.err")" || true
if ! jq -e .leaks >/dev/null 2>&1 <<<"$inspect_json"; then
	echo "soak: crijournal inspect --leaks failed: $(cat "$base/inspect-leaks.err")" >&2
	exit 1
fi
while IFS= read -r l; do
	[ -n "$l" ] && leaks+=("$l")
done < <(jq -r '(.leaks + .held)[] | select(.kind != "cgroup") | "\(.kind) \(.what)\(if .reason then ": " + .reason else "" end)"' <<<"$inspect_json")
# What inspect does not look at: mounts below the soak's directory outside the daemon's
# root, and any process whose command line names the run root.
while read -r m; do
	case "$m" in "$base/root" | "$base/root/"*) continue ;; esac
	leaks+=("mount $m")
done < <(awk -v b="$base" 'index($5, b) == 1 {print $5}' /proc/self/mountinfo)
for pid in $(our_processes); do
	leaks+=("process $pid: $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)")
done

# --- figures ------------------------------------------------------------------
up="$(jq '[.per_pod[]? | select(.error == null)] | length' "$base/bench.json" 2>/dev/null || echo "?")"
failed="$(jq '.failed' "$base/bench.json" 2>/dev/null || echo "?")"
retries="$(jq '.retries_total' "$base/bench.json" 2>/dev/null || echo "?")"
teardown_errors="$(jq '.teardown_errors | length' "$base/bench.json" 2>/dev/null || echo "?")"
swept="$(jq '.swept' "$base/bench.json" 2>/dev/null || echo "?")"
kinds="$(jq -c '.error_kinds // {}' "$base/bench.json" 2>/dev/null || echo "?")"
recovered="$(grep -c 'msg="recovery done"' "$base/daemon.log" || true)"
recovery="$(grep 'msg="recovery done"' "$base/daemon.log" | awk '{for (i = 1; i <= NF; i++) {split($i, kv, "="); if (kv[2] ~ /^[0-9]+$/) sum[kv[1]] += kv[2]}}
	END {printf "rolled back %d, cached %d, kept %d, resumed %d, reconciled %d, retrying %d", sum["rolled_back"], sum["cached"], sum["kept"], sum["resumed"], sum["reconciled"], sum["retrying"]}')"
cat <<REPORT
chaos soak: $PODS pods ($CONCURRENCY at a time, client timeout $CLIENT_TIMEOUT${IMAGE:+, container $IMAGE}), $(elapsed)s
  SIGKILLs: $kills ($((kills - removal_kills)) during bench, every ${KILL_MIN}-${KILL_MAX}s; $removal_kills during $rounds removal rounds); daemon starts: $recovered; exits by itself: $restarts_by_itself
  recoveries, summed: $recovery
  pods up (converged): $up; failed after retries: $failed; client retries: $retries; errors seen by the client: $kinds
  bench exit status: $bench_rc (non-zero when a kill cut its teardown); teardown calls cut: $teardown_errors; pods swept by label: $swept; left for the removal rounds: $left_over
  journal records before the stop: $records
  leaks found: ${#leaks[@]}
REPORT
for l in "${leaks[@]}"; do echo "    $l"; done
if [ "${#leaks[@]}" -gt 0 ] || [ "$records" != 0 ]; then
	KEEP="${KEEP:-}"
	exit 1
fi
