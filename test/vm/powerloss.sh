#!/usr/bin/env bash
# test/vm/powerloss.sh: `make test-powerloss`. Power cuts in the project's emulated VM
# (build.sh, boot.sh): the node's state (the journal, containers/storage, the CNI
# host-local and libcni state, the kubelet's root, manifests and pod logs) lives on a
# persistent ext4 disk image; each boot runs test/powerloss_test.go's TestPowerLoss, which
# checks what the previous cut left and then runs a workload (a real kubelet's static pods
# added and removed, crictl runp -T and create -T timeouts that leave cached creations,
# pulls and removals of images, pods made and removed), and QEMU is killed with SIGKILL
# from here at a seeded random moment of it: the guest loses whatever its page cache held,
# no sync, no unmount. The next boot runs e2fsck -p, as a node does, and checks again. The
# last boot checks, removes everything and requires a clean node and journal.
#
# RUNTIME=containerd runs the same against containerd 2.x instead (the anchor; built by
# make bench-deps into CONTAINERD2_DIR): its findings (failed starts, lost images, leaks,
# pods not back) are counted, not failures.
#
# Env: CUTS (30), SEED (printed; the same seed gives the same cut delays and the same
# workload choices, though not the same instructions cut: the emulator's timing varies),
# CUT_MIN and CUT_MAX (seconds after the workload starts, 3 and 45), OUT
# (_output/test-powerloss/<time>), DISK_SIZE (6G), VM_DIR, VM_MEM (3072), VM_TIMEOUT
# (s per boot, 1800). As root, after make build and make kubelet.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top"
cuts=${CUTS:-30}
seed=${SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
cut_min=${CUT_MIN:-3} cut_max=${CUT_MAX:-45}
out=${OUT:-$top/_output/test-powerloss/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$out/bin
mkdir -p "$bin"
tags=${GOTAGS:-containers_image_openpgp,exclude_graphdriver_btrfs,nri_no_wasm}
echo "test-powerloss: seed $seed, $cuts cuts, results in $out (replay: SEED=$seed CUTS=$cuts make test-powerloss)"
echo "seed $seed cuts $cuts" >"$out/seed"

test/vm/build.sh >"$out/vm-build.log" 2>&1 || { cat "$out/vm-build.log" >&2; exit 1; }
go test -c -tags "$tags" -o "$bin/e2e.test" ./test
# Run from copies: the VM reads the host's files through 9p with loose caching, and a
# binary rebuilt on the host meanwhile could be read half old, half new.
for b in crijournal crijournal-pause crijournal-pause-sleep kubelet; do
	[ -x "bin/$b" ] || { echo "test-powerloss: bin/$b missing: run make build kubelet" >&2; exit 2; }
	cp "bin/$b" "$bin/$b"
done
runtime=${RUNTIME:-crijournal}
if [ "$runtime" = containerd ]; then
	ctd=${CONTAINERD2_DIR:-/usr/local/libexec/crijournal/containerd-2.4.2}
	[ -x "$ctd/containerd" ] || { echo "test-powerloss: no containerd in $ctd: run make bench-deps" >&2; exit 2; }
	mkdir -p "$bin/containerd"
	cp "$ctd"/* "$bin/containerd/"
	export CRIJOURNAL_POWERLOSS_RUNTIME=containerd CRIJOURNAL_POWERLOSS_CONTAINERD=$bin/containerd
fi
echo "runtime $runtime" >>"$out/seed"

disk=$out/node.ext4
rm -f "$disk"
truncate -s "${DISK_SIZE:-6G}" "$disk"
mkfs.ext4 -q -F -L crijournal-node "$disk"

export CRIJOURNAL_BIN=$bin/crijournal CRIJOURNAL_KUBELET=$bin/kubelet
export CRIJOURNAL_TEST_TIME_SCALE=${CRIJOURNAL_TEST_TIME_SCALE:-10} CRIJOURNAL_E2E_VM_NODE=1
export CRIJOURNAL_POWERLOSS_NODE=/var/lib/crijournal-node CRIJOURNAL_POWERLOSS_EVENTS=$out/events.jsonl
export CRIJOURNAL_POWERLOSS_SEED=$seed
export VM_DISK=$disk VM_DISK_MOUNT=$CRIJOURNAL_POWERLOSS_NODE VM_RW=$out VM_MEM=${VM_MEM:-3072}

RANDOM=$seed
failed=() summary=()
for ((boot = 1; boot <= cuts + 1; boot++)); do
	mode=cut
	[ $boot -gt "$cuts" ] && mode=final
	logs=$out/boot-$boot
	mkdir -p "$logs"
	delay_ms=$((cut_min * 1000 + (RANDOM * 32768 + RANDOM) % ((cut_max - cut_min) * 1000 + 1)))
	t0=$(date +%s)
	(
		cd test
		CRIJOURNAL_POWERLOSS_BOOT=$boot CRIJOURNAL_POWERLOSS_MODE=$mode CRIJOURNAL_POWERLOSS_LOGS=$logs \
			VM_RUN=$logs/vm VM_PIDFILE=$logs/qemu.pid \
			exec "$top/test/vm/boot.sh" "$bin/e2e.test" -test.run '^TestPowerLoss$' -test.v -test.timeout 60m
	) >"$logs/test.log" 2>&1 &
	vm=$!
	verdict=
	if [ $mode = cut ]; then
		while [ ! -e "$logs/workload-started" ] && kill -0 $vm 2>/dev/null; do sleep 0.5; done
		if [ -e "$logs/workload-started" ]; then
			sleep "$(awk -v ms=$delay_ms 'BEGIN {printf "%.3f", ms / 1000}')"
			if kill -0 $vm 2>/dev/null && [ -s "$logs/qemu.pid" ]; then
				kill -KILL "$(cat "$logs/qemu.pid")" 2>/dev/null || true
				verdict="cut ${delay_ms} ms into the workload"
			fi
		fi
	fi
	rc=0
	wait $vm || rc=$?
	took=$(($(date +%s) - t0))
	fsck=$(cat "$logs/vm/fsck.status" 2>/dev/null || echo '?')
	findings=$(grep -c "\"boot\":$boot,\"ev\":\"finding\"" "$out/events.jsonl" 2>/dev/null || true)
	if [ "$runtime" = containerd ] && [ "${findings:-0}" -gt 0 ]; then
		verdict="${findings} finding(s); ${verdict:-no cut}"
	elif [ "${findings:-0}" -gt 0 ] || grep -q -- '--- FAIL' "$logs/test.log" || [ "$fsck" = '?' ] || [ "$fsck" -ge 4 ] ||
		! grep -q "\"boot\":$boot,\"ev\":\"verified\"" "$out/events.jsonl" 2>/dev/null ||
		{ [ $mode = cut ] && [ -z "$verdict" ]; } || { [ $mode = final ] && [ $rc -ne 0 ]; }; then
		why=$(grep -m1 -E 'failed-start|leak:|lost-image|pod-not-back|half-present|manifest-lost|record left|--- FAIL|panic' "$logs/test.log" | cut -c1-200 || true)
		failed+=("boot $boot: ${why:-the guest ended before the cut (rc $rc)}")
		verdict="FAILED (${why:-rc $rc}); ${verdict:-no cut}"
	fi
	line="boot $boot ($mode): e2fsck $fsck, ${verdict:-passed}, ${took}s"
	echo "test-powerloss: $line"
	summary+=("$line")
done

{
	echo "runtime $runtime, seed $seed, $cuts cuts"
	printf '%s\n' "${summary[@]}"
	for class in failed-start leak lost-image pod-not-back half-present manifest-lost; do
		echo "findings $class: $(grep -c "\"ev\":\"finding\",\"name\":\"$class\"" "$out/events.jsonl" 2>/dev/null || true)"
	done
	echo "failed boots: ${#failed[@]}"
	printf '%s\n' "${failed[@]}"
} >"$out/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
	echo "test-powerloss: FAILED ${#failed[@]} of $((cuts + 1)) boots (seed $seed; logs in $out):" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "test-powerloss: $cuts cuts, every boot passed (seed $seed; logs in $out)"
