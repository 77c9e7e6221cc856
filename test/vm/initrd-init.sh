#!/bin/sh
# The initramfs's /init (test/vm/build.sh): the host's / over virtio-9p, read-only, with a
# tmpfs over it as an overlay, becomes the root; then guest-init.sh runs as PID 1.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in virtio_pci 9pnet_virtio 9p overlay; do modprobe $m || echo "initrd: modprobe $m failed"; done
msize=512000 cache=loose usize=75% ginit=
for a in $(cat /proc/cmdline); do
	case $a in
	vm.msize=*) msize=${a#*=} ;;
	vm.cache=*) cache=${a#*=} ;;
	vm.upper_size=*) usize=${a#*=} ;;
	vm.init=*) ginit=${a#*=} ;;
	esac
done
if ! mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=$msize,cache=$cache hostroot /lower; then
	echo "initrd: cannot mount the host's root over 9p"
	poweroff -f
fi
mount -t tmpfs -o mode=755,size=$usize upper /upper
mkdir -p /upper/u /upper/w
if ! mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w overlay /newroot; then
	echo "initrd: the overlay root failed"
	poweroff -f
fi
umount /proc /sys /dev 2>/dev/null
exec switch_root /newroot "$ginit"
