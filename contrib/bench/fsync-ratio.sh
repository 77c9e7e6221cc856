#!/bin/bash
# fsync-ratio.sh: the journal's fsync cost, as a ratio measured in one run.
#
# Starts two crijournal daemons side by side, identical but for journal_no_sync, runs
# `crijournal-bench --compare-endpoint` against them (the workload alternates between the
# two), then stops them by PID and removes what they made. Run as root from the
# repository, after `make build`. Arguments go to `crijournal-bench` (default: -n 50 -c 8
# --rounds 5).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-n 50 -c 8 --rounds 5)

start_daemon sync 1
start_daemon nosync 2 --journal-no-sync
"$bench" --endpoint "unix://$base/sync/cri.sock" \
	--compare-endpoint "unix://$base/nosync/cri.sock" "${args[@]}"
