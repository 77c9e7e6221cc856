#!/bin/bash
# pods.sh: pod sandbox latency. Starts a crijournal daemon on a node of its own (bridge +
# host-local), runs `crijournal bench` against it, then stops it by PID and removes what it
# made. Run as root from the repository, after `make build`. Arguments go to
# `crijournal bench` (default: -n 50 -c 8). Extra daemon flags: SERVE_FLAGS="...".
set -euo pipefail
source "$(dirname "$0")/lib.sh"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-n 50 -c 8)

# shellcheck disable=SC2086
start_daemon pods 4 ${SERVE_FLAGS:-}
"$bin" bench --endpoint "unix://$base/pods/cri.sock" "${args[@]}"
