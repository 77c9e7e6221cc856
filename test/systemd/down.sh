#!/bin/bash
# down.sh DIR [CGROUP]: powers off the systemd that up.sh DIR booted (SIGRTMIN+4, then SIGKILL
# after 20 s) and removes the cgroups it was rooted at.
set -uo pipefail
D=${1:?usage: down.sh DIR [CGROUP]}
CG=${2:-$(basename "$D")}
if [ -s "$D/sd.pid" ]; then
	p=$(cat "$D/sd.pid")
	if [ "$(cat /proc/$p/comm 2>/dev/null)" = systemd ]; then
		kill -s SIGRTMIN+4 "$p"
		for _ in $(seq 200); do [ -d /proc/$p ] || break; sleep 0.1; done
		[ -d /proc/$p ] && kill -KILL "$p"
		for _ in $(seq 50); do [ -d /proc/$p ] || break; sleep 0.1; done
	fi
	rm -f "$D/sd.pid"
fi
for _ in $(seq 50); do
	find /sys/fs/cgroup/*/"$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
	ls -d /sys/fs/cgroup/*/"$CG" >/dev/null 2>&1 || exit 0
	sleep 0.1
done
echo "down.sh: cgroups left: $(ls -d /sys/fs/cgroup/*/"$CG")" >&2
exit 1
