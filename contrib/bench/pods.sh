#!/bin/bash
# pods.sh: pod sandbox latency. Starts a crijournal daemon on a node of its own (bridge +
# host-local), runs `crijournal-bench` against it, then stops it by PID and removes what it
# made. Run as root from the repository, after `make build`. Arguments go to
# `crijournal-bench` (default: -n 50 -c 8). Extra daemon flags: SERVE_FLAGS="...".
# With IMAGE=ref, the daemon pulls it through the loopback registry $REG_ADDR and bench
# gets --image ref (a running container in each pod). CNI_SUBNET widens the network, for
# more than 250 pods:
#
#   IMAGE=docker.io/library/busybox:latest CNI_SUBNET=10.251.0.0/16 \
#       contrib/bench/pods.sh --workload scale -n 500 -c 4
set -euo pipefail
source "$(dirname "$0")/lib.sh"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-n 50 -c 8)

if [ -n "${IMAGE:-}" ]; then
	mirror_config "$base/crijournal.toml"
	export DAEMON_CONFIG="$base/crijournal.toml"
	args+=(--image "$IMAGE")
fi
# shellcheck disable=SC2086
start_daemon pods 4 ${SERVE_FLAGS:-}
[ -z "${IMAGE:-}" ] || pull pods "$IMAGE"
"$bench" --endpoint "unix://$base/pods/cri.sock" "${args[@]}"
