#!/bin/bash
# outer.sh: boots a real systemd as PID 1 of its own pid, mount, cgroup, uts, ipc and net namespaces,
# on a host whose PID 1 is not systemd. Run it as root under a pty (systemd wants a console):
#   setsid script -qfec "SDTEST_DIR=/tmp/sdtest MODE=hybrid test/systemd/outer.sh" /tmp/sdtest/console.log </dev/null &
# MODE=hybrid (default): cgroup v1 controllers + name=systemd + cgroup2 at unified, the layout of
# this host, where resource limits work. MODE=v2: a private cgroup2 only (no cpu/memory/pids here).
# It writes systemd's host PID to $SDTEST_DIR/sd.pid. Use it with nse; stop it with
#   kill -s SIGRTMIN+4 "$(cat $SDTEST_DIR/sd.pid)"    (a clean poweroff; not `systemctl poweroff`)
# then remove the cgroups it made: find /sys/fs/cgroup/*/$SDTEST_CGROUP -depth -type d -exec rmdir {} \;
set -e
MODE=${MODE:-hybrid}
D=${SDTEST_DIR:-/tmp/sdtest}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$D"
# the new cgroup namespace is rooted at the cgroup this script is in: put it in $SDTEST_CGROUP first
mkdir -p /sys/fs/cgroup/unified/$SDTEST_CGROUP
echo $$ > /sys/fs/cgroup/unified/$SDTEST_CGROUP/cgroup.procs
if [ "$MODE" != v2 ]; then
  for c in systemd cpu cpuacct cpuset memory devices freezer blkio pids; do
    mkdir -p /sys/fs/cgroup/$c/$SDTEST_CGROUP
    [ $c = cpuset ] && { cat /sys/fs/cgroup/cpuset/cpuset.cpus > /sys/fs/cgroup/cpuset/$SDTEST_CGROUP/cpuset.cpus; cat /sys/fs/cgroup/cpuset/cpuset.mems > /sys/fs/cgroup/cpuset/$SDTEST_CGROUP/cpuset.mems; }
    echo $$ > /sys/fs/cgroup/$c/$SDTEST_CGROUP/cgroup.procs
  done
fi
# stdin stays the pty (a background job would get /dev/null): inner.sh binds it as /dev/console
unshare --mount --pid --fork --cgroup --uts --ipc --net --propagation private env MODE=$MODE SDTEST_DIR="$D" "$HERE/inner.sh" <&0 &
u=$!
for _ in $(seq 1 50); do p=$(pgrep -P $u) && break; sleep 0.1; done
echo "$p" > "$D/sd.pid"
wait $u
