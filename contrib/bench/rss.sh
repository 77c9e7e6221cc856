#!/bin/bash
# rss.sh: the daemon's resident memory at three points: 1 s after it started, after pulling
# $IMAGE (from the loopback registry $REG_ADDR, see lib.sh), and with $PODS pods up under
# the idle workload's poller for a few seconds and removed again. Prints VmRSS, its anonymous and file parts
# and the peak (VmHWM) from /proc/<pid>/status, in kB. Run as root from the repository,
# after `make build`; arguments go to `crijournal-bench --workload idle`.
#
# The pull and the pods are also sampled, every 10 ms (SAMPLE_MS), from their start to their
# end: "highest" is the largest VmRSS a sample saw in that phase, with its anonymous and
# file parts, which says which part sets the phase's peak. (The start is over before the
# socket appears: its peak is the "started" line's.)
#
#   REG_ADDR=127.0.0.1:5000 contrib/bench/rss.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
IMAGE="${IMAGE:-docker.io/library/busybox:latest}"
mirror_config "$base/crijournal.toml"
DAEMON_CONFIG="$base/crijournal.toml" start_daemon rss "${OCTET:-8}"
pid=${pids[0]}
show() {
	awk -v at="$1" '/^(VmHWM|VmRSS|RssAnon|RssFile):/ {v[$1] = $2}
		END {printf "%-14s VmRSS %6d kB (anon %6d, file %6d), peak %6d kB\n", at, v["VmRSS:"], v["RssAnon:"], v["RssFile:"], v["VmHWM:"]}' "/proc/$pid/status"
}
# sample <file>: until killed, writes to file the largest VmRSS seen so far with its anon
# and file parts. Shell builtins only (read -t on a pipe nobody writes is the sleep), so
# that sampling forks nothing.
sample() {
	local k v _ rss=0 anon=0 file=0 max=0 nap every
	printf -v every '0.%03d' "${SAMPLE_MS:-10}"
	exec {nap}<> <(:)
	while :; do
		while read -r k v _; do
			case $k in VmRSS:) rss=$v ;; RssAnon:) anon=$v ;; RssFile:) file=$v ;; esac
		done <"/proc/$pid/status" || return 0
		if ((rss > max)); then
			max=$rss
			echo "$rss $anon $file" >"$1"
		fi
		read -r -t "$every" -u "$nap" _ || true
	done
}
# sampled <phase> <command...>: runs the command with the daemon sampled, then prints the
# phase's highest VmRSS.
sampled() {
	local phase=$1 out="$base/highest" sampler rss anon file
	shift
	: >"$out"
	sample "$out" &
	sampler=$!
	"$@"
	kill "$sampler"
	wait "$sampler" 2>/dev/null || true
	read -r rss anon file <"$out" || true
	printf '%-14s highest VmRSS %6d kB (anon %6d, file %6d)\n' "$phase" "${rss:-0}" "${anon:-0}" "${file:-0}"
}
sleep 1
show "started"
sampled "pull" pull rss "$IMAGE"
show "pulled"
pods() {
	"$bench" --endpoint "unix://$base/rss/cri.sock" --workload idle -n "${PODS:-20}" --duration "${DURATION:-5s}" \
		--image "$IMAGE" "$@" >/dev/null 2>&1
}
sampled "${PODS:-20} pods" pods "$@"
show "after ${PODS:-20} pods"
