#!/usr/bin/env bash
# mk-images.sh OUTDIR — stand-ins of the images the kubelet's node conformance specs pull
# (issue 23), built without a network the way the project's kit builds critest's
# (test/kit/images.sh: single-layer OCI tarballs by test/kit/mkimage.sh). Writes
# OUTDIR/images.list, "<tarball> <upstream reference>", which test/kit/registry.sh pushes
# as 127.0.0.1:PORT/<path>.
#
# Needs bin/agnhost and bin/nonewprivs (make node-e2e-build): the two Go programs of
# k8s.io/kubernetes/test/images, built from test/kubelet; and bin/cadvisor, the density
# suites' cAdvisor stand-in (test/kit/cadvisor, cAdvisor v0.61.0). See IMAGES.md for what
# each stand-in is, and which images cannot be made.
set -euo pipefail
OUT=${1:?usage: mk-images.sh OUTDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
KIT=$ROOT/test/kit
BIN=${BIN:-$ROOT/bin}
MK="$KIT/mkimage.sh"
for f in "$BIN/agnhost" "$BIN/nonewprivs" "$BIN/cadvisor"; do
	[ -e "$f" ] || { echo "mk-images.sh: $f missing (make node-e2e-build)" >&2; exit 1; }
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The kit's images: busybox (Debian's dynamic busybox with applet hard links, /etc/passwd),
# pause (pause.c), the nginx stand-in (busybox httpd on :80).
"$KIT/images.sh" "$OUT/kit" >/dev/null
: >"$OUT/images.list"
add() { echo "$1 $2" >>"$OUT/images.list"; }

# rootfs DIR TARBALL: unpack the single layer of one of mkimage.sh's tarballs
rootfs() {
	local t=$work/unpack layer
	rm -rf "$t" && mkdir -p "$t" "$1"
	tar -C "$t" -xf "$2"
	layer=$(jq -r '.[0].Layers[0]' "$t/manifest.json")
	tar -C "$1" -xzpf "$t/$layer"
}

E=registry.k8s.io/e2e-test-images
rootfs "$work/bb" "$OUT/kit/busybox.tar"
# The kit's busybox as upstream's busybox image lays it out: every applet in /bin too
# (Debian's puts some in /sbin and /usr/bin; the sysctl specs run /bin/sysctl), and an
# nmeter stand-in (Debian's busybox has no nmeter; the container lifecycle specs take the
# time with milliseconds from `nmeter -d0 '%3t'`): test/node-e2e/nmeter.
for a in $(chroot "$work/bb" /bin/busybox --list); do
	[ -e "$work/bb/bin/$a" ] || ln "$work/bb/bin/busybox" "$work/bb/bin/$a"
done
(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -o "$work/bb/bin/nmeter" ./test/node-e2e/nmeter)
"$KIT/mkimage.sh" "$work/bb" "$OUT/busybox.tar" $E/busybox:1.37.0-2 '{"Cmd":["sh"]}' >/dev/null

# as they are -----------------------------------------------------------------------------
add busybox.tar $E/busybox:1.37.0-2           # imageutils.BusyBox
add busybox.tar $E/busybox:1.36.1-1           # memory_qos_test (not NodeConformance)
add kit/pause.tar registry.k8s.io/pause:3.10.2 # imageutils.Pause, GetPauseImageName
add kit/nginx.tar $E/nginx:1.27.0-2           # imageutils.Nginx
add kit/nginx.tar $E/nginx:1.28.0-2           # imageutils.NginxNew
# glibc-dns-testing (Debian + dnsutils + coredns upstream): the specs only run
# `hostname; hostname -f`, which the kit's busybox does through glibc's resolver too
add busybox.tar $E/glibc-dns-testing:2.1.1 # imageutils.GlibcDnsTesting

# agnhost: busybox + /agnhost (static, from the module), as test/images/agnhost/Dockerfile
# lays it out: /agnhost-2 link, /uploads, porter's localhost.crt/key, user-defined-in-image
# (uid 1000) in group-defined-in-image (gid 50000); ENTRYPOINT /agnhost, CMD pause. Missing:
# alpine's bind-tools, netcat, iproute2, iperf, socat, coredns (busybox has nc, wget, ip).
KSRC=$(cd "$ROOT/test/kubelet" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images
cp -a "$work/bb" "$work/agnhost"
install -m 0755 "$BIN/agnhost" "$work/agnhost/agnhost"
ln -s agnhost "$work/agnhost/agnhost-2"
mkdir -p "$work/agnhost/uploads" "$work/agnhost/home/user-defined-in-image"
install -m 0644 "$KSRC/agnhost/porter/localhost.crt" "$KSRC/agnhost/porter/localhost.key" "$work/agnhost/"
echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$work/agnhost/etc/passwd"
printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >>"$work/agnhost/etc/group"
chown 1000:1000 "$work/agnhost/home/user-defined-in-image"
# Of the tools upstream's agnhost (alpine) has, the specs run curl (exec lifecycle hooks,
# networking checks), bash (probes) and netcat with UDP (node-pod UDP checks: Debian's
# busybox nc has no -u): the host's, with their libraries (netcat-openbsd for nc).
host_tool() { # host_tool ROOTFS PROGRAM
	local p lib
	p=$(command -v "$2") || { echo "mk-images.sh: no $2 on this host (apt-get install $2)" >&2; exit 1; }
	rm -f "$1/usr/bin/$2" "$1/bin/$2"
	install -D -m 0755 "$p" "$1$p"
	[ "$p" = "/usr/bin/$2" ] && [ ! -e "$1/bin/$2" ] && ln -s "/usr/bin/$2" "$1/bin/$2"
	for lib in $(ldd "$p" 2>/dev/null | grep -oE '/[^ ]+\.so[^ ]*' | sort -u); do
		mkdir -p "$1$(dirname "$lib")"
		cp -L "$lib" "$1$lib"
	done
}
host_tool "$work/agnhost" curl
host_tool "$work/agnhost" bash
host_tool "$work/agnhost" nc
AGN='{"Entrypoint":["/agnhost"],"Cmd":["pause"],"ExposedPorts":{"80/tcp":{},"8080/tcp":{},"8081/tcp":{},"9376/tcp":{},"5000/tcp":{}}}'
"$KIT/mkimage.sh" "$work/agnhost" "$OUT/agnhost.tar" $E/agnhost:2.66.1 "$AGN" >/dev/null
add agnhost.tar $E/agnhost:2.66.1 # imageutils.Agnhost
add agnhost.tar $E/agnhost:2.55   # imageutils.AgnhostPrev (the same program: only its version differs)

# kitten and nautilus: agnhost + data.json, CMD test-webserver (the .jpg files are not in the module)
for v in kitten:1.8 nautilus:1.8; do
	n=${v%%:*}
	cp -a "$work/agnhost" "$work/$n"
	install -m 0644 "$KSRC/$n/html/data.json" "$work/$n/data.json"
	"$KIT/mkimage.sh" "$work/$n" "$OUT/$n.tar" "$E/$v" '{"Entrypoint":["/agnhost"],"Cmd":["test-webserver"],"ExposedPorts":{"80/tcp":{}}}' >/dev/null
	add "$n.tar" "$E/$v"
done

# nonewprivs: busybox + the module's nnp (prints its effective uid), setuid root, CMD nnp
cp -a "$work/bb" "$work/nnp"
mkdir -p "$work/nnp/usr/local/bin"
install -m 4755 "$BIN/nonewprivs" "$work/nnp/usr/local/bin/nnp"
"$KIT/mkimage.sh" "$work/nnp" "$OUT/nonewprivs.tar" $E/nonewprivs:1.4 '{"Cmd":["nnp"]}' >/dev/null
add nonewprivs.tar $E/nonewprivs:1.4

# nonroot: busybox, USER 1234
"$KIT/mkimage.sh" "$work/bb" "$OUT/nonroot.tar" $E/nonroot:1.5 '{"Cmd":["sh"],"User":"1234"}' >/dev/null
add nonroot.tar $E/nonroot:1.5

# ipc-utils: busybox + util-linux's ipcmk/ipcs/ipcrm of the host, with their libraries
cp -a "$work/bb" "$work/ipc"
for b in ipcmk ipcs ipcrm; do
	p=$(command -v $b) || continue
	rm -f "$work/ipc/usr/bin/$b" "$work/ipc/bin/$b"
	install -m 0755 "$p" "$work/ipc/usr/bin/$b"
	for lib in $(ldd "$p" 2>/dev/null | grep -oE '/[^ ]+\.so[^ ]*' | sort -u); do
		mkdir -p "$work/ipc$(dirname "$lib")"
		cp -L "$lib" "$work/ipc$lib"
	done
done
"$KIT/mkimage.sh" "$work/ipc" "$OUT/ipc-utils.tar" $E/ipc-utils:1.4 '{"Cmd":["sh"]}' >/dev/null
add ipc-utils.tar $E/ipc-utils:1.4

# cadvisor: the density and resource-usage specs run it as a pod (hard-coded
# gcr.io/cadvisor/cadvisor:v0.47.2, reached through the runtime's gcr.io mirror) and read the
# kubelet's and the runtime's cgroups through its REST API. The stand-in is cAdvisor
# v0.61.0's container manager behind the part of the API the suite reads
# (test/kit/cadvisor), static, laid out as upstream's image: /usr/bin/cadvisor, ENTRYPOINT
# /usr/bin/cadvisor -logtostderr (the pod gives the rest).
mkdir -p "$work/cadvisor/usr/bin" "$work/cadvisor/tmp"
install -m 0755 "$BIN/cadvisor" "$work/cadvisor/usr/bin/cadvisor"
"$KIT/mkimage.sh" "$work/cadvisor" "$OUT/cadvisor.tar" gcr.io/cadvisor/cadvisor:v0.47.2 \
	'{"Entrypoint":["/usr/bin/cadvisor","-logtostderr"],"ExposedPorts":{"8080/tcp":{}}}' >/dev/null
add cadvisor.tar gcr.io/cadvisor/cadvisor:v0.47.2

echo "wrote $(wc -l <"$OUT/images.list") references to $OUT/images.list"
