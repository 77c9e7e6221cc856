#!/bin/bash
# critest.sh BINARY OUTDIR [critest flags...]: one CRI conformance run of a crijournal binary with
# cgroup_manager = "systemd", inside a systemd booted for it (up.sh), through the project's kit:
# test/kit/critest.sh ($CRITEST_RUN), which then runs in the booted systemd's network with its
# loopback registry and the daemon on private paths, NRI on. The images, crane and critest are
# made on the host first (the booted systemd has no network). Compare its counts with `make
# critest` (the same script on the host, the cgroupfs driver). As root; ~3-4 minutes. At
# 4c49137: 126 passed, 2 failed, 14 skipped with NRI (113/2/27 without); the failure cgroupfs
# does not have, UserNamespaces NamespaceMode_POD, is this sandbox's: its /proc has read-only
# submounts (inner.sh), so runc in a user namespace may not mount proc here.
set -euo pipefail
BIN=$(readlink -f "${1:?usage: critest.sh BINARY OUTDIR [critest flags...]}")
OUT=${2:?usage: critest.sh BINARY OUTDIR [critest flags...]}
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
CRITEST_RUN=${CRITEST_RUN:-$(cd "$HERE/../kit" && pwd)/critest.sh}
[ -x "$CRITEST_RUN" ] || { echo "critest.sh: no $CRITEST_RUN (set CRITEST_RUN)" >&2; exit 1; }
# what the kit would fetch, made here: the booted systemd has no network
"$HERE/../kit/images.sh"
(source "$HERE/../kit/lib.sh" && kit_crane >/dev/null && kit_critest >/dev/null)
# What runs inside must be outside /tmp and /run, which the booted systemd's root hides.
W=$(mktemp -d /var/tmp/cjsd-critest.XXXXXX)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
case $OUT in /tmp/* | /run/*) echo "critest.sh: OUTDIR must not be under /tmp or /run" >&2; exit 1 ;; esac
cp "$BIN" "$W/crijournal"; cp "$(dirname "$BIN")/crijournal-pause" "$(dirname "$BIN")/crijournal-pause-sleep" "$W/"
# test/kit/critest.sh drops the caller's CRIJOURNAL_*: the driver is set by a wrapper.
cat >"$W/crijournal-systemd" <<W
#!/bin/sh
exec env CRIJOURNAL_CGROUP_MANAGER=systemd $W/crijournal "\$@"
W
chmod +x "$W/crijournal-systemd"
SD=$W/sd CG=$(basename "$W" | tr -c 'a-zA-Z0-9\n' _)
trap '"$HERE/down.sh" "$SD" "$CG"; rm -rf "$W"' EXIT
"$HERE/up.sh" "$SD" "$CG"
# storage's overlay driver cannot sit on the booted systemd's root overlay: a tmpfs /var/lib.
SDTEST_DIR=$SD SDTEST_CGROUP=$CG "$HERE/nse" mount -t tmpfs tmpfs /var/lib
SDTEST_DIR=$SD SDTEST_CGROUP=$CG "$HERE/nse" "$CRITEST_RUN" "$W/crijournal-systemd" "$OUT" "$@" || true
# What it wrote is in the booted systemd's overlay, gone at its poweroff: copied out.
SDTEST_DIR=$SD SDTEST_CGROUP=$CG "$HERE/nse" tar -C "$OUT" -cf - . | tar -C "$OUT" -xf -
SDTEST_DIR=$SD SDTEST_CGROUP=$CG "$HERE/nse" systemctl list-units --all --no-legend --plain 'crijournal*' '*pod*.slice' | tee "$OUT/units-left.txt"
grep -m1 '^passed ' "$OUT/summary.txt"
