#!/bin/sh
# PID 1 of the guest (test/vm/build.sh installs it in VM_DIR): the root is the host's /
# read-only with a tmpfs over it. It sets up a node's kernel interfaces (cgroup v2 with
# every controller delegated, securityfs for AppArmor, bpffs, module autoloading), mounts
# the persistent disk if boot.sh attached one (vm.disk=<mount point>: e2fsck -p first, as a
# node's boot does after a power cut), runs the run directory's cmd.sh under tini (which
# reaps conmon and the rest), writes its exit status, syncs and powers off.
VM=$(dirname "$0")
BB=$VM/bb/bin/busybox
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$VM/bin
run= sd= disk=

mount -t proc proc /proc
for a in $(cat /proc/cmdline); do
	case $a in
	vm.run=*) run=${a#*=} ;;
	vm.systemd=1) sd=1 ;;
	vm.disk=*) disk=${a#*=} ;;
	esac
done
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t mqueue mqueue /dev/mqueue
mount -t securityfs securityfs /sys/kernel/security
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t tmpfs -o mode=755 tmpfs /run && mkdir -p /run/lock
mount -t tmpfs -o mode=1777 tmpfs /tmp
# containers/storage's overlay driver cannot stack on the overlay root: tmpfs here (the
# persistent disk, when there is one, is ext4).
for d in /var/lib/containers /run/containers; do mkdir -p $d && mount -t tmpfs -o mode=700 tmpfs $d; done
kver=$(uname -r)
mkdir -p /lib/modules/$kver && mount --bind "$VM/kernel/lib/modules/$kver" /lib/modules/$kver
echo "$VM/bin/modprobe" >/proc/sys/kernel/modprobe
hostname vm 2>/dev/null || $BB hostname vm
ip link set lo up 2>/dev/null || $BB ip link set lo up
echo "$(sed 's/\([^ ]\+\)/+\1/g' /sys/fs/cgroup/cgroup.controllers)" >/sys/fs/cgroup/cgroup.subtree_control

# The run directory (the host's, read-write) and the extra read-write shares ("tag path").
# (Below /tmp or /run they are hidden by the tmpfs mounted there: made again on it.)
mkdir -p "$run" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 vmrun "$run"
if [ -s "$run/rw" ]; then
	while read -r tag path; do
		mkdir -p "$path" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 "$tag" "$path" || echo "vm: cannot mount $path" >&2
	done <"$run/rw"
fi
out=/dev/console
modprobe virtio_console
for p in /sys/class/virtio-ports/*; do
	[ "$(cat "$p/name" 2>/dev/null)" = out ] && out=/dev/${p##*/}
done

if [ -n "$disk" ]; then
	modprobe virtio_blk
	modprobe ext4
	i=0
	while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
	# e2fsck -p: 0 clean, 1 errors fixed, 2 fixed and a reboot asked; 4 and more: not fixed.
	e2fsck -p /dev/vda >"$run/fsck.log" 2>&1
	echo $? >"$run/fsck.status"
	mkdir -p "$disk"
	mount -t ext4 /dev/vda "$disk" 2>>"$run/fsck.log" || echo "vm: cannot mount the disk at $disk" >>"$run/fsck.log"
fi

date +%s.%N >"$run/t_ready"
if [ -n "$sd" ]; then
	# systemd as PID 1 (sysinit, basic and dbus), the command as a unit.
	mkdir -p /run/systemd/system
	cat >/run/systemd/system/vmrun.target <<T
[Unit]
Description=vm run target
Requires=vmrun.service basic.target dbus.socket
After=vmrun.service
AllowIsolate=yes
T
	cat >/run/systemd/system/vmrun.service <<T
[Unit]
Description=vm run command
After=basic.target dbus.socket
[Service]
Type=exec
ExecStart=$VM/tini/usr/bin/tini-static -s -- /bin/bash $run/cmd.sh
StandardInput=null
StandardOutput=file:$out
StandardError=inherit
Delegate=yes
ExecStopPost=/bin/sh -c 'echo \$\$EXIT_STATUS > $run/status; sync; systemctl poweroff -ff'
T
	exec /lib/systemd/systemd --system --unit=vmrun.target --show-status=0
fi
"$VM/tini/usr/bin/tini-static" -s -- /bin/bash "$run/cmd.sh" </dev/null >"$out" 2>&1
echo $? >"$run/status"
sync
[ -n "$disk" ] && umount "$disk" 2>/dev/null
$BB poweroff -f
