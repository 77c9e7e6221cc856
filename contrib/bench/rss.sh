#!/bin/bash
# rss.sh: the daemon's resident memory at three points: 1 s after it started, after pulling
# $IMAGE (from the loopback registry $REG_ADDR, see lib.sh), and with $PODS pods up under
# the idle workload's poller for a few seconds and removed again. Prints VmRSS, its anonymous and file parts
# and the peak (VmHWM) from /proc/<pid>/status, in kB. Run as root from the repository,
# after `make build`; arguments go to `crijournal-bench --workload idle`.
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
sleep 1
show "started"
pull rss "$IMAGE"
show "pulled"
"$bench" --endpoint "unix://$base/rss/cri.sock" --workload idle -n "${PODS:-20}" --duration "${DURATION:-5s}" \
	--image "$IMAGE" "$@" >/dev/null 2>&1
show "after ${PODS:-20} pods"
