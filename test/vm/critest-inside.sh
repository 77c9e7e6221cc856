#!/usr/bin/env bash
# test/vm/critest-inside.sh OUT: run in the VM by test/vm/run.sh (VM_CRITEST=1): the CRI
# conformance suite (critest v1.37.0) against the daemon on its default paths with the
# cgroupfs driver, NRI on, through the project's kit, test/kit: the stand-in images of
# $KIT_IMAGES (/var/tmp/crij-images, made on the host by images.sh) on its loopback registry
# (registry.sh), the registries critest names mirrored to it; critest and crane from bin/ or
# PATH, built on the host (the VM's checkout is read-only). Its counts go to
# OUT/critest/summary.txt.
set -uo pipefail
out=$1
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kit=$top/test/kit
images=${KIT_IMAGES:-/var/tmp/crij-images}
export REG_ADDR=127.0.0.1:5000 # the VM's own loopback
bin=${CRIJOURNAL_BIN:-$top/bin/crijournal}
sock=/run/crijournal/crijournal.sock

# The storage's overlay driver cannot sit on the VM's root overlay, and critest's host-idmap
# user-namespace specs probe /var/lib for idmapped mounts, which neither that overlay nor a
# tmpfs (before Linux 6.3) takes: /var/lib becomes an ext4 filesystem on a loop device (a
# sparse image in the VM's memory, filled with /var/lib's files), as on a node's disk. Where
# that fails, the storage gets a tmpfs and those specs skip.
img=/tmp/var-lib.ext4
# The loop and ext4 modules are loaded by hand: no udev here, and devtmpfs has no
# /dev/loop-control before the module is in.
"$(cat /proc/sys/kernel/modprobe)" loop >"$out/critest-mkfs.log" 2>&1
"$(cat /proc/sys/kernel/modprobe)" ext4 >>"$out/critest-mkfs.log" 2>&1
if truncate -s 6G "$img" && mkfs.ext4 -q -F -d /var/lib "$img" >>"$out/critest-mkfs.log" 2>&1 &&
	mount -o loop "$img" /var/lib 2>>"$out/critest-mkfs.log"; then
	echo "critest: /var/lib on ext4 ($img)"
else
	echo "critest: no ext4 for /var/lib (see critest-mkfs.log); the storage on a tmpfs"
	mkdir -p /var/lib/crijournal && mount -t tmpfs tmpfs /var/lib/crijournal
fi
mkdir -p /var/lib/crijournal
mkdir -p /etc/cni/net.d /etc/containers
cp "$top/contrib/cni/10-crijournal-bridge.conflist" /etc/cni/net.d/
[ -e /etc/containers/policy.json ] || cp "$top/contrib/containers/policy.json" /etc/containers/
for h in registry.k8s.io gcr.io k8s.gcr.io docker.io; do
	printf '[[registries]]\nprefix = "%s"\nlocation = "%s"\ninsecure = true\n' "$h" "$REG_ADDR"
done >/tmp/critest.toml

"$kit/registry.sh" start "$images" >"$out/critest-registry.log" 2>&1 ||
	{ echo "critest: the registry did not start"; cat "$out/critest-registry.log"; exit 1; }
CRIJOURNAL_CONFIG=/tmp/critest.toml "$bin" serve >"$out/critest-daemon.log" 2>&1 &
daemon=$!
for _ in $(seq 600); do
	crictl --runtime-endpoint "unix://$sock" --timeout 10s version >/dev/null 2>&1 && break
	kill -0 $daemon 2>/dev/null || { echo "critest: the daemon exited"; tail -20 "$out/critest-daemon.log"; exit 1; }
	sleep 1
done
echo "critest: daemon $daemon serving; critest starts (it takes most of an hour in here)"
# The kit's run bounds ginkgo at 25 minutes; in the emulated VM the suite needs longer.
mkdir -p "$out/critest"
CRITEST_TIMEOUT=${CRITEST_TIMEOUT:-6000} "$kit/run-critest.sh" "unix://$sock" "$out/critest" \
	-nri-socket /var/run/nri/nri.sock --ginkgo.timeout=95m | tee "$out/critest/summary.txt"
rc=${PIPESTATUS[0]}
kill $daemon; wait $daemon
"$kit/registry.sh" stop
exit $rc
