#!/bin/bash
# up.sh DIR [CGROUP]: boots a systemd as PID 1 of its own namespaces (outer.sh, under a pty made
# by script(1)), waits until it is up, and brings the loopback of its network namespace up.
# DIR holds sd.pid and console.log; CGROUP (default: the base name of DIR) names the cgroup it
# is rooted at in every hierarchy. Stop it with down.sh DIR [CGROUP].
set -euo pipefail
D=${1:?usage: up.sh DIR [CGROUP]}
CG=${2:-$(basename "$D")}
HERE=$(cd "$(dirname "$0")" && pwd)
command -v script >/dev/null || { echo "up.sh: script(1) (util-linux) is needed" >&2; exit 1; }
[ -x /lib/systemd/systemd ] || { echo "up.sh: /lib/systemd/systemd is missing (apt-get install systemd dbus)" >&2; exit 1; }
command -v dbus-daemon >/dev/null || { echo "up.sh: dbus-daemon is missing (apt-get install dbus)" >&2; exit 1; }
mkdir -p "$D"
rm -f "$D/sd.pid"
setsid script -qfec "SDTEST_DIR=$D SDTEST_CGROUP=$CG $HERE/outer.sh" "$D/console.log" </dev/null >/dev/null 2>&1 &
for _ in $(seq 100); do [ -s "$D/sd.pid" ] && break; sleep 0.1; done
[ -s "$D/sd.pid" ] || { echo "up.sh: systemd did not start; $D/console.log:" >&2; tail -20 "$D/console.log" >&2; exit 1; }
state=
for _ in $(seq 100); do
	state=$(SDTEST_DIR=$D SDTEST_CGROUP=$CG "$HERE/nse" systemctl is-system-running 2>/dev/null || true)
	case $state in running | degraded) break ;; esac
	sleep 0.1
done
case $state in running | degraded) ;; *)
	echo "up.sh: systemd is $state after 10 s; $D/console.log:" >&2; tail -20 "$D/console.log" >&2; exit 1 ;;
esac
SDTEST_DIR=$D SDTEST_CGROUP=$CG "$HERE/nse" ip link set lo up
echo "systemd up: pid $(cat "$D/sd.pid"), run commands in it with: SDTEST_DIR=$D SDTEST_CGROUP=$CG $HERE/nse CMD"
