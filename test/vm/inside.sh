#!/usr/bin/env bash
# test/vm/inside.sh BIN OUT DRIVER: run in the VM by test/vm/run.sh. It runs the test
# binaries in BIN, each from its package's directory, the oci package's then the
# end-to-end ones, with the cgroup driver DRIVER (cgroupfs, or systemd where systemd is
# PID 1: VM_INIT=systemd; or, with DRIVER critest, the CRI conformance suite), writes each one's output to OUT/<driver>-<name>.log, prints
# the verdicts, and exits non-zero if any failed.
#
# Which tests: those whose behaviour depends on the kernel's cgroup v2 hierarchy,
# AppArmor or user namespaces (TESTS_OCI, TESTS_E2E override the -test.run patterns).
set -uo pipefail
bin=$1 out=$2 driver=${3:-cgroupfs}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# critest: the conformance suite instead (critest-inside.sh).
[ "$driver" = critest ] && exec "$top/test/vm/critest-inside.sh" "$out"

echo "inside: kernel $(uname -r); $(stat -fc %T /sys/fs/cgroup) at /sys/fs/cgroup ($(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null));" \
	"AppArmor $(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)"
# Debian's apparmor package: the parser the daemon loads its default profile with.
command -v apparmor_parser >/dev/null || { echo "inside: no apparmor_parser (apt-get install apparmor)"; exit 1; }

# The oci package: the runtime on v2 (Create/Delete leave no cgroup, resources and stats
# from the v2 files, OOM, AppArmor profiles loaded into the kernel).
TESTS_OCI=${TESTS_OCI:-'TestCreateStartStateAndLog|TestDeleteIsIdempotentAndLeavesNothing|TestReadStatsRealCgroup|TestRuntimeStats|TestSpecAppArmorDefaultLoad|TestLoadedAppArmor|TestAppArmorProfileParses|TestStatsDuringDeleteKeepsNoCgroup'}
# End to end: limits, update, stats and OOM on v2; AppArmor's default and Localhost
# profiles; a user-namespace pod; the container lifecycle; a sample of the crash
# matrix (the steps that make cgroups) leaving nothing behind, cgroups included.
# A real kubelet (failCgroupV1 at its default) runs a static pod. CheckpointContainer with
# Debian's CRIU 3.17, which cannot dump on the host's kernel (6.13 or later), and the
# restore of its archive and of a checkpoint image (also through a real kubelet's checkpoint API).
# UpdatePodSandboxResources on a pod's v2 cgroup, and swap in stats from memory.swap.*.
# With the systemd driver: the limits and the lifecycle in units, the crash matrix rows of
# the steps that make units, a kubelet with cgroupDriver systemd and a pod's slice resized
# (as TestSystemdDriver runs them on the host, in a systemd of its own).
case $driver in
cgroupfs)
	tests='^(TestCgroupV2Limits|TestCgroupV2OOMKilled|TestAppArmorConfines|TestUsernsPod|TestContainerLifecycle|TestCrashMatrix|TestKubeletRunsStaticPod|TestCheckpointContainer|TestCheckpointCrash|TestRestoreContainer|TestKubeletCheckpointRestore|TestUpdatePodSandboxResources|TestSwapStats)$'
	rows='^(container-create/oci-container/after-action|container-create/oci-conmon/after-intent|sandbox-create/pause-process/after-action)$' ;;
systemd)
	export CRIJOURNAL_E2E_CGROUP_MANAGER=systemd
	echo "inside: systemd $(systemctl is-system-running 2>&1)"
	tests='^(TestCgroupV2Limits|TestContainerLifecycle|TestCrashMatrix|TestKubeletSystemdDriver|TestUpdatePodSandboxResources)$'
	rows='systemd-slice/after-|oci-container/after-action' ;;
*) echo "inside: unknown driver $driver"; exit 2 ;;
esac
TESTS_E2E=${TESTS_E2E:-$tests}
export CRIJOURNAL_E2E_CRASH_ROWS=${CRIJOURNAL_E2E_CRASH_ROWS:-$rows}

failed=()
run() { # name dir binary pattern
	local name=$1 dir=$2 test=$3 pattern=$4
	echo "inside: $name: -test.run '$pattern'"
	local log=$out/$driver-$name.log
	(cd "$dir" && "$test" -test.v -test.timeout 45m -test.run "$pattern") >"$log" 2>&1
	local rc=$?
	grep -E '^\s*--- (PASS|FAIL|SKIP)|^(PASS|FAIL|ok|panic)' "$log" || true
	[ $rc -eq 0 ] || { failed+=("$driver-$name"); grep -B2 -A20 -E '^\s*--- FAIL' "$log" | tail -n 120; }
}
[ "$driver" = systemd ] || run oci "$top/oci" "$bin/oci.test" "$TESTS_OCI"
run e2e "$top/test" "$bin/e2e.test" "$TESTS_E2E"

if [ ${#failed[@]} -gt 0 ]; then
	echo "inside: FAILED: ${failed[*]} (logs in $out)"
	exit 1
fi
echo "inside: every test passed (logs in $out)"
