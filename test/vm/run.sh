#!/usr/bin/env bash
# test/vm/run.sh: `make test-vm`. The tests of a cgroup v2 + AppArmor node, in the
# project's emulated VM (build.sh and boot.sh beside this script: Debian's kernel under
# QEMU/TCG with cgroup_no_v1=all and AppArmor on; the host's / read-only with a tmpfs over
# it), since this machine boots cgroup v1 without AppArmor.
#
# The test binaries are built here, on the host (compiling in the VM is 10-20x slower);
# test/vm/inside.sh runs them in the VM and writes their output to OUT (default
# _output/test-vm/<time>), read-write in there. The tests' waits are stretched by
# CRIJOURNAL_TEST_TIME_SCALE (10; see internal/testenv), and CRIJOURNAL_E2E_VM_NODE makes a
# missing v2 hierarchy or AppArmor a failure, not a skip.
#
# Two boots: one with a plain init and the cgroupfs driver, one with systemd as PID 1 and
# the systemd driver (VM_DRIVERS, default "cgroupfs systemd"; "critest" is a third: the CRI
# conformance suite against the daemon, see critest-inside.sh, most of an hour).
#
# Env: VM_DIR (where build.sh prepares the VM, /var/tmp/crijournal-vm), OUT, VM_DRIVERS, TESTS_E2E and
# TESTS_OCI (-test.run patterns; see inside.sh), VM_TIMEOUT (s, per boot, default 3000),
# VM_MEM (MiB, 4096). The binaries must be built (make build, make kubelet) and the
# Makefile's deps installed.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top"
vm=$top/test/vm
out=${OUT:-$top/_output/test-vm/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
bin=$out/bin
mkdir -p "$bin"
tags=${GOTAGS:-containers_image_openpgp,exclude_graphdriver_btrfs,nri_no_wasm}

"$vm/build.sh" >"$out/vm-build.log" 2>&1 || { cat "$out/vm-build.log" >&2; exit 1; }
echo "test-vm: building the test binaries into $bin"
go test -c -tags "$tags" -o "$bin/e2e.test" ./test
go test -c -tags "$tags" -o "$bin/oci.test" ./oci

# critest's tools and images from the project's kit (test/kit), made on the host (the VM has
# no network and a read-only view of the checkout): the stand-in images, crane and critest.
if [[ " ${VM_DRIVERS:-} " == *" critest "* ]]; then
	# shellcheck source=../kit/lib.sh
	. "$top/test/kit/lib.sh"
	"$top/test/kit/images.sh" >"$out/images.log" 2>&1 || { cat "$out/images.log" >&2; exit 1; }
	kit_crane >/dev/null
	kit_critest >/dev/null
	# critest's AppArmor specs load their profiles through sudo (as root: a no-op).
	command -v sudo >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends sudo
fi

export CRIJOURNAL_TEST_TIME_SCALE=${CRIJOURNAL_TEST_TIME_SCALE:-10}
export CRIJOURNAL_E2E_VM_NODE=1
# The VM reads the host's files through 9p with loose caching: a binary rebuilt on the host
# while the VM runs could be read half old, half new (a Go runtime crash in there). The
# daemon, its pause programs (looked for beside it) and the kubelet are copied into the
# results directory and run from there.
for b in crijournal crijournal-pause crijournal-pause-sleep kubelet; do
	[ -e "$top/bin/$b" ] && cp "$top/bin/$b" "$bin/$b"
done
export CRIJOURNAL_BIN=$bin/crijournal
export CRIJOURNAL_KUBELET=$bin/kubelet

# boot DRIVER: one boot of the VM running inside.sh with DRIVER. On a loaded host the
# emulated kernel sometimes panics at boot before it runs anything ("IO-APIC + timer
# doesn't work": its timer check lost the race with a slow vCPU): such a boot is tried
# again, up to three times; one that got as far as the tests is not.
boot() {
	local driver=$1 init= rc
	[ "$driver" = systemd ] && init=systemd
	for try in 1 2 3; do
		echo "test-vm: booting the VM for the $driver driver (results in $out)"
		rc=0
		VM_INIT=$init VM_RW="$out" VM_MEM=${VM_MEM:-4096} VM_TIMEOUT=${VM_TIMEOUT:-3000} \
			"$vm/boot.sh" "$top/test/vm/inside.sh" "$bin" "$out" "$driver" 2> >(tee "$out/$driver-vm.log" >&2) || rc=$?
		wait # for tee
		if [ $rc -eq 124 ] && grep -q 'Kernel panic' "$out/$driver-vm.log" &&
			[ -z "$(find "$out" -maxdepth 1 -name "$driver-*.log" ! -name "$driver-vm.log")" ]; then
			echo "test-vm: the VM's kernel panicked at boot (try $try); booting it again" >&2
			continue
		fi
		return $rc
	done
	return 1
}

failed=()
for driver in ${VM_DRIVERS:-cgroupfs systemd}; do
	boot "$driver" || failed+=("$driver")
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "test-vm: FAILED with the driver(s): ${failed[*]} (logs in $out)" >&2
	exit 1
fi
echo "test-vm: passed with every driver (logs in $out)"
