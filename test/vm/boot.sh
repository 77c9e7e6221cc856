#!/usr/bin/env bash
# test/vm/boot.sh CMD [ARGS...]: boot the emulated VM that build.sh prepared (QEMU without
# KVM), run CMD in it as root in the same directory with the same environment (the host's
# / read-only with a throw-away tmpfs over it), stream its output, power off, and exit
# with CMD's status; 124 when the guest wrote none (a timeout, a kernel panic, or a power
# cut: QEMU killed from outside).
#
# Env:
#   VM_DIR     where build.sh put the kernel and the initramfs (/var/tmp/crijournal-vm)
#   VM_MEM     MiB of memory (2048)          VM_SMP   vCPUs (2)
#   VM_TIMEOUT seconds before QEMU is killed (1800)
#   VM_RW      "dir1 dir2": host directories mounted read-write at the same paths
#   VM_INIT    systemd: Debian's systemd as PID 1 (basic.target and dbus), CMD as a unit
#   VM_DISK    a raw ext4 image attached as a virtio disk (cache=writeback: what the guest
#              flushed is on the host; what its page cache held is lost when QEMU dies),
#              checked with e2fsck -p and mounted at VM_DISK_MOUNT (/var/lib/crijournal-node)
#   VM_RUN     the run directory (CMD's script, the guest's status, console and fsck logs);
#              default a temporary one, removed at the end
#   VM_PIDFILE where QEMU's PID is written: `kill -KILL` of it is a power cut
#   VM_DEBUG   1: print the guest's console log after the run
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
VM_DIR=${VM_DIR:-/var/tmp/crijournal-vm}
[ -s "$VM_DIR/initrd.img" ] || { echo "boot.sh: $VM_DIR is not prepared: run test/vm/build.sh" >&2; exit 2; }
if [ -n "${VM_RUN:-}" ]; then
	run=$VM_RUN
	mkdir -p "$run" && rm -f "$run/status" "$run/t_ready" "$run/rw" "$run/stdin" "$run/fsck.status"
else
	mkdir -p "$VM_DIR/runs"
	run=$(mktemp -d "$VM_DIR/runs/r.XXXXXX")
	trap 'rm -rf "$run"' EXIT
fi

{
	echo '#!/bin/bash'
	export -p | grep -vE '^declare -x (BASH_[A-Z_]*|SHLVL|OLDPWD|PWD|_|SHELLOPTS|BASHOPTS)='
	printf 'cd %q || exit 125\n' "$PWD"
	printf 'exec'
	printf ' %q' "$@"
	printf '\n'
} >"$run/cmd.sh"

extra=()
i=0
for d in ${VM_RW:-}; do
	d=$(cd "$d" && pwd) || exit 2
	extra+=(-virtfs "local,path=$d,mount_tag=vmrw$i,security_model=none,multidevs=remap")
	echo "vmrw$i $d" >>"$run/rw"
	i=$((i + 1))
done
append="console=ttyS0 quiet loglevel=4 panic=-1 no_timer_check cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 apparmor=1 security=apparmor"
append+=" vm.init=$VM_DIR/guest-init.sh vm.run=$run"
[ "${VM_INIT:-}" = systemd ] && append+=" vm.systemd=1"
if [ -n "${VM_DISK:-}" ]; then
	[ -f "$VM_DISK" ] || { echo "boot.sh: no disk image $VM_DISK" >&2; exit 2; }
	extra+=(-drive "file=$VM_DISK,if=virtio,format=raw,cache=writeback,discard=unmap")
	append+=" vm.disk=${VM_DISK_MOUNT:-/var/lib/crijournal-node}"
fi

# The guest's output port is QEMU's stdio; its stdin must never see EOF (a closed host side
# blocks the guest's writes), so it is a FIFO held open here.
mkfifo "$run/stdin" && exec 3<>"$run/stdin"
t0=$(date +%s.%N)
timeout -k 10 "${VM_TIMEOUT:-1800}" \
	qemu-system-x86_64 -accel tcg,thread=multi -cpu "${VM_CPU:-max}" -M pc -smp "${VM_SMP:-2}" -m "${VM_MEM:-2048}" \
	-nodefaults -no-user-config -display none -no-reboot -nic none \
	-kernel "$VM_DIR/vmlinuz" -initrd "$VM_DIR/initrd.img" -append "$append" \
	-serial "file:$run/console.log" \
	-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
	-virtfs "local,path=$run,mount_tag=vmrun,security_model=none,multidevs=remap" \
	"${extra[@]}" \
	-device virtio-serial-pci -chardev stdio,id=out,signal=off -device virtserialport,chardev=out,name=out \
	-pidfile "${VM_PIDFILE:-$run/qemu.pid}" \
	0<&3 &
tpid=$!
trap 'kill -TERM $tpid 2>/dev/null' INT TERM HUP
wait $tpid
qrc=$?
[ $qrc -gt 128 ] && kill -0 $tpid 2>/dev/null && { wait $tpid; qrc=$?; }
trap - INT TERM HUP
exec 3>&-
t1=$(date +%s.%N)
if [ -n "${VM_DEBUG:-}" ] || [ ! -s "$run/status" ]; then
	echo "---- guest console (qemu rc=$qrc) ----" >&2
	tail -n 60 "$run/console.log" >&2
fi
if [ -s "$run/t_ready" ]; then
	awk -v a="$t0" -v b="$(cat "$run/t_ready")" -v c="$t1" 'BEGIN {printf "vm: boot %.1fs, total %.1fs\n", b-a, c-a}' >&2
fi
[ -s "$run/status" ] || { echo "boot.sh: no status from the guest (qemu rc=$qrc)" >&2; exit 124; }
st=$(tr -dc 0-9 <"$run/status")
exit "${st:-255}"
