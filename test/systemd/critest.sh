#!/bin/bash
# critest.sh BINARY OUTDIR [critest flags...]: one CRI conformance run of a crijournal binary with
# cgroup_manager = "systemd", inside a systemd booted for it (up.sh), through the conformance
# kit's critest-run.sh ($CRITEST_RUN, default /work/critest-run.sh), which then runs on the
# booted systemd's private default paths, network and loopback registry. Compare its counts with
# the same script run on the host (the cgroupfs driver). As root; ~3-4 minutes. At 4c49137:
# 113 passed, 2 failed, 27 skipped (with -nri-socket /var/run/nri/nri.sock: 126/2/14); the
# failure cgroupfs does not have, UserNamespaces NamespaceMode_POD, is this sandbox's: its /proc
# has read-only submounts (inner.sh), so runc in a user namespace may not mount proc here.
set -euo pipefail
BIN=$(readlink -f "${1:?usage: critest.sh BINARY OUTDIR [critest flags...]}")
OUT=${2:?usage: critest.sh BINARY OUTDIR [critest flags...]}
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
CRITEST_RUN=${CRITEST_RUN:-/work/critest-run.sh}
[ -x "$CRITEST_RUN" ] || { echo "critest.sh: no $CRITEST_RUN (set CRITEST_RUN)" >&2; exit 1; }
# What runs inside must be outside /tmp and /run, which the booted systemd's root hides.
W=$(mktemp -d /var/tmp/cjsd-critest.XXXXXX)
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
case $OUT in /tmp/* | /run/*) echo "critest.sh: OUTDIR must not be under /tmp or /run" >&2; exit 1 ;; esac
cp "$BIN" "$W/crijournal"; cp "$(dirname "$BIN")/crijournal-pause" "$(dirname "$BIN")/crijournal-pause-sleep" "$W/"
# critest-run.sh drops the caller's CRIJOURNAL_*: the driver is set by a wrapper.
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
