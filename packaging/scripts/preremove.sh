#!/bin/sh
# crijournal's package, before its files go: on the last removal (dpkg `prerm remove`, rpm
# %preun 0) the service is stopped and disabled. The pods keep running (KillMode=process),
# as containerd's leave theirs: remove them first (crictl rmp -a) to have none left. An
# upgrade (`prerm upgrade`, %preun 1) does nothing: the new package's script restarts it.
set -e
case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac
if [ -d /run/systemd/system ]; then
	systemctl stop crijournal.service || true
fi
if command -v systemctl >/dev/null 2>&1; then
	systemctl disable crijournal.service || true
fi
exit 0
