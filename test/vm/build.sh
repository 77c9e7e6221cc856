#!/usr/bin/env bash
# test/vm/build.sh: prepare the emulated VM of make test-vm and make test-powerloss under
# VM_DIR (default /var/tmp/crijournal-vm): QEMU (Debian's qemu-system-x86, installed if
# missing), Debian's kernel (linux-image-amd64), busybox-static and tini, only *extracted*
# there (no maintainer script runs and /boot is not touched), and an initramfs that mounts
# the host's / read-only over virtio-9p with a tmpfs over it (initrd-init.sh) and then runs
# guest-init.sh as PID 1. Idempotent and quick once done; remove VM_DIR/kver to pick up a
# newer kernel.
set -euo pipefail
VM_DIR=${VM_DIR:-/var/tmp/crijournal-vm}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$VM_DIR/debs"
cd "$VM_DIR"

missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
if [ ${#missing[@]} -gt 0 ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -s kver ]; then
	apt-get update -qq
	kpkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	(cd debs && rm -f ./*.deb && apt-get download -q "$kpkg" busybox-static tini 2>&1 | grep -v 'Download is performed unsandboxed' || true)
	rm -rf kernel bb tini bin
	mkdir -p kernel bb tini bin
	dpkg-deb -x debs/linux-image-*.deb kernel
	dpkg-deb -x debs/busybox-static_*.deb bb
	dpkg-deb -x debs/tini_*.deb tini
	kver=$(ls kernel/lib/modules | head -n 1)
	bb/bin/busybox depmod -b "$VM_DIR/kernel" "$kver"
	# The kernel's request_module() helper in the guest: busybox's modprobe over the
	# extracted modules (bind-mounted at /lib/modules/<kver> by guest-init.sh).
	ln -sf ../bb/bin/busybox bin/modprobe
	ln -sf ../bb/bin/busybox bin/busybox
	ln -sf "kernel/boot/vmlinuz-$kver" vmlinuz
	echo "$kver" >kver
	rm -f debs/*.deb
fi
kver=$(cat kver)

# The initramfs: busybox, the modules that mount the host's root (virtio, 9p, overlay) and
# our /init; and guest-init.sh. Made again only when a script changed, and put in place
# by rename: another run's VM may be booting from them.
if [ -s initrd.img ] && cmp -s "$here/initrd-init.sh" initrd.d/init && cmp -s "$here/guest-init.sh" guest-init.sh; then
	echo "vm: ready in $VM_DIR (kernel $kver)"
	exit 0
fi
install -m 0755 "$here/guest-init.sh" guest-init.sh.new && mv -f guest-init.sh.new guest-init.sh
rm -rf initrd.d && mkdir -p initrd.d/{bin,dev,proc,sys,lower,upper,newroot}
cp bb/bin/busybox initrd.d/bin/busybox
for a in sh mount umount mkdir modprobe switch_root cat echo sleep poweroff; do ln -s busybox "initrd.d/bin/$a"; done
mods=kernel/lib/modules/$kver
for m in virtio_pci 9pnet_virtio 9p overlay; do
	for f in $(grep -E "/$m\.ko(\.xz)?:" "$mods/modules.dep" | tr -d ':'); do
		mkdir -p "initrd.d/lib/modules/$kver/$(dirname "$f")"
		cp "$mods/$f" "initrd.d/lib/modules/$kver/$f"
	done
done
cp "$mods"/modules.dep "$mods"/modules.alias "$mods"/modules.symbols "initrd.d/lib/modules/$kver/"
install -m 0755 "$here/initrd-init.sh" initrd.d/init
(cd initrd.d && find . | ../bb/bin/busybox cpio -o -H newc 2>/dev/null | gzip -1) >initrd.img.new
mv initrd.img.new initrd.img
echo "vm: ready in $VM_DIR (kernel $kver)"
