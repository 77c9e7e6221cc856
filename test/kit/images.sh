#!/usr/bin/env bash
# images.sh [OUTDIR]: the stand-ins of the images critest (cri-tools v1.37.0) and the bench
# pull, built locally with no registry and no network but apt's (mkimage.sh, one layer each).
# OUTDIR defaults to $KIT_IMAGES (/var/tmp/crij-images). Writes OUTDIR/<name>.tar and
# OUTDIR/images.list, one "<tarball> <upstream reference>" a line: the names critest and the
# kubelet ask for (several may share a tarball: one image, one ID), which registry.sh pushes.
# When images.list is newer than this script, mkimage.sh, pause.c and nnp.c it does nothing
# (FORCE=1 rebuilds).
#
#   pause.tar          /pause (pause.c), USER 65535:65535  -> registry.k8s.io/pause:3.9
#   pause-sandbox.tar  the same program, another image ID  -> registry.k8s.io/pause:3.10
#   busybox.tar        busybox + applet links, /etc/passwd -> e2e-test-images/busybox:1.29-2
#   nginx.tar, hostnet-nginx.tar  busybox httpd whose PID 1 is named nginx
#   httpd.tar, nonewprivs.tar     stand-ins of e2e-test-images/httpd:2.4.39-4, nonewprivs:1.3
#   test-image-*.tar   critest's gcr.io/k8s-staging-cri-tools images, as cri-tools/images/*
#                      describes them (busybox + a file, or + USER ...)
# The digest-pinned test-image-digest@sha256:9700f9... cannot be made (its digest is its
# content's): critest's spec that pulls it fails, for every runtime.
#
# Needs gcc with static glibc (libc6-dev), jq, tar, gzip, and a busybox: Debian's dynamic
# busybox, fetched with `apt-get download busybox` into OUTDIR/.cache (not installed),
# since Debian's busybox-static prefers its applets (sh runs `ls` itself, never /bin/ls, so
# critest's MaskedPaths spec cannot pass with it). BUSYBOX=/bin/busybox takes the static one.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=${1:-$KIT_IMAGES}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [ -z "${FORCE:-}" ] && [ -s "$OUT/images.list" ]; then
	stale=$(find "$KIT_DIR"/{images.sh,mkimage.sh,pause.c,nnp.c} -newer "$OUT/images.list")
	if [ -z "$stale" ]; then
		echo "images: $OUT is up to date ($(wc -l <"$OUT/images.list") references)"
		exit 0
	fi
fi
for c in gcc jq tar gzip; do
	command -v "$c" >/dev/null || { echo "images.sh: no $c (make deps; apt-get install jq)" >&2; exit 1; }
done
MK=$KIT_DIR/mkimage.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

BB=${BUSYBOX:-}
if [ -z "$BB" ]; then
	if [ ! -x "$OUT/.cache/bin/busybox" ]; then
		mkdir -p "$OUT/.cache/bin" "$work/deb"
		(cd "$work/deb" && apt-get download busybox >/dev/null 2>&1 && dpkg -x busybox_*.deb "$work/deb/x" &&
			cp "$work/deb/x/bin/busybox" "$OUT/.cache/bin/busybox.tmp" &&
			mv "$OUT/.cache/bin/busybox.tmp" "$OUT/.cache/bin/busybox") || true
	fi
	BB=/bin/busybox
	[ -x "$OUT/.cache/bin/busybox" ] && BB=$OUT/.cache/bin/busybox
	[ "$BB" = /bin/busybox ] && echo "images.sh: apt-get download busybox failed; using the static /bin/busybox (critest's MaskedPaths spec will fail)" >&2
fi
[ -x "$BB" ] || { echo "images.sh: no busybox at $BB (make deps installs busybox-static)" >&2; exit 1; }

list=$work/images.list
: >"$list"
add() { echo "$1 $2" >>"$list"; }
mk() { "$MK" "$@" >/dev/null; }
cc_static() { gcc -static -Os -s -Wall -Wextra -Werror -o "$1" "$2"; }

# base_rootfs DIR: a root filesystem laid out as the official busybox image's.
base_rootfs() {
	local r=$1 lib a
	mkdir -p "$r"/{bin,dev,etc,home,proc,root,sys,tmp,usr/bin,usr/sbin,sbin,var/run,var/www,var/spool/mail}
	chmod 1777 "$r/tmp"
	chmod 700 "$r/root"
	cp "$BB" "$r/bin/busybox"
	for lib in $(ldd "$BB" 2>/dev/null | grep -oE '/[^ ]+\.so[^ ]*' | sort -u); do
		mkdir -p "$r$(dirname "$lib")"
		cp -L "$lib" "$r$lib"
	done
	# Hard links, as in the official image: critest's MaskedPaths spec masks /bin/ls and then
	# runs /bin/sh, which would fail if the applets were symbolic links to /bin/busybox.
	for a in $("$BB" --list-full); do
		[ "$a" = bin/busybox ] && continue
		mkdir -p "$r/$(dirname "$a")"
		ln -f "$r/bin/busybox" "$r/$a"
	done
	cat >"$r/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
	cat >"$r/etc/group" <<'EOF'
root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:26:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
EOF
	echo "hosts: files dns" >"$r/etc/nsswitch.conf"
	# Debian's busybox has no ipcs applet (critest's HostIpc specs run `ipcs -m`)...
	[ -e "$r/bin/ipcs" ] || install -m 0755 /dev/stdin "$r/bin/ipcs" <<'EOF'
#!/bin/sh
# `ipcs -m` of the crijournal test kit: shared memory segments from /proc/sysvipc/shm
echo "------ Shared Memory Segments --------"
echo "key        shmid      owner      perms      bytes      nattch     status"
awk 'NR > 1 { printf "0x%08x %-10s %-10s %-10s %-10s %-10s\n", $1, $2, $8, $3, $4, $7 }' /proc/sysvipc/shm
EOF
	# ... nor pgrep (critest's ExecSync timeout spec runs `pgrep sleep || true`)
	[ -e "$r/bin/pgrep" ] || install -m 0755 /dev/stdin "$r/bin/pgrep" <<'EOF'
#!/bin/sh
# `pgrep [-f] PATTERN` of the crijournal test kit
full=0
[ "$1" = -f ] && { full=1; shift; }
rc=1
for d in /proc/[0-9]*; do
	p=${d#/proc/}
	[ "$p" = "$$" ] && continue
	if [ $full = 1 ]; then n=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null); else n=$(cat "$d/comm" 2>/dev/null); fi
	[ -n "$n" ] && echo "$n" | grep -qE -- "$1" && { echo "$p"; rc=0; }
done
exit $rc
EOF
}

R=gcr.io/k8s-staging-cri-tools
E=registry.k8s.io/e2e-test-images
CMD_SH='{"Cmd":["sh"]}'

# pause ---------------------------------------------------------------------------------
mkdir -p "$work/pause"
cc_static "$work/pause/pause" "$KIT_DIR/pause.c"
mk "$work/pause" "$OUT/pause.tar" registry.k8s.io/pause:3.9 '{"Entrypoint":["/pause"],"User":"65535:65535"}'
add pause.tar registry.k8s.io/pause:3.9
add pause.tar k8s.gcr.io/pause:3.9
# The runtimes' sandbox image (containerd's sandbox_image in the bench): the same program,
# another image ID, a tag critest never touches (it pulls and removes pause:3.9, and
# RemoveImage drops every tag of an image).
mk "$work/pause" "$OUT/pause-sandbox.tar" registry.k8s.io/pause:3.10 \
	'{"Entrypoint":["/pause"],"User":"65535:65535","Labels":{"io.crijournal.role":"sandbox"}}'
add pause-sandbox.tar registry.k8s.io/pause:3.10

# busybox -------------------------------------------------------------------------------
base_rootfs "$work/bb"
mk "$work/bb" "$OUT/busybox.tar" $E/busybox:1.29-2 "$CMD_SH"
add busybox.tar $E/busybox:1.29-2
add busybox.tar docker.io/library/busybox:latest

# nginx stand-ins: busybox httpd ---------------------------------------------------------
# PID 1 is a shell whose comm is "nginx" (critest: `pidof nginx`), whose command line holds
# "master process" (critest reads /proc/1/cmdline), whose PID is in /var/run/nginx.pid; it
# serves HTTP with busybox httpd and exits 0 on SIGTERM.
for v in nginx:80 hostnet-nginx:12003; do
	n=${v%%:*} port=${v##*:}
	cp -a "$work/bb" "$work/$n"
	mkdir -p "$work/$n/usr/share/nginx/html"
	printf '<html><body><h1>Welcome to nginx!</h1></body></html>\n' >"$work/$n/usr/share/nginx/html/index.html"
	ref=$E/nginx:1.14-2
	[ "$n" = nginx ] || ref=$R/hostnet-nginx-amd64:latest
	mk "$work/$n" "$OUT/$n.tar" "$ref" "$(jq -cn --arg p "$port" '{
		Entrypoint: ["/bin/sh", "-c", ("trap '"'"'kill $h 2>/dev/null; exit 0'"'"' TERM INT QUIT; echo -n nginx > /proc/self/comm; echo $$ > /var/run/nginx.pid; httpd -f -p " + $p + " -h /usr/share/nginx/html & h=$!; wait $h"), "nginx: master process nginx -g daemon off;"],
		ExposedPorts: {($p + "/tcp"): {}}, StopSignal: "SIGTERM"}')"
done
add nginx.tar $E/nginx:1.14-2
add hostnet-nginx.tar $R/hostnet-nginx-amd64:latest

# httpd stand-in (critest's Multiple Containers: HTTP on :80, "httpd" in the container log)
cp -a "$work/bb" "$work/httpd"
mkdir -p "$work/httpd/usr/local/apache2/htdocs"
printf '<html><body><h1>It works!</h1></body></html>\n' >"$work/httpd/usr/local/apache2/htdocs/index.html"
# shellcheck disable=SC2016 # $h and $! are the container shell's
mk "$work/httpd" "$OUT/httpd.tar" $E/httpd:2.4.39-4 '{
	"Entrypoint":["/bin/sh","-c","trap '"'"'kill $h 2>/dev/null; exit 0'"'"' TERM INT; echo \"httpd: serving /usr/local/apache2/htdocs on :80 (busybox httpd stand-in)\" >&2; httpd -f -p 80 -h /usr/local/apache2/htdocs & h=$!; wait $h"],
	"ExposedPorts":{"80/tcp":{}}}'
add httpd.tar $E/httpd:2.4.39-4

# nonewprivs stand-in: a setuid-root program printing its effective uid (nnp.c)
cp -a "$work/bb" "$work/nnp"
mkdir -p "$work/nnp/usr/local/bin"
cc_static "$work/nnp/usr/local/bin/nnp" "$KIT_DIR/nnp.c"
chmod 4755 "$work/nnp/usr/local/bin/nnp"
mk "$work/nnp" "$OUT/nonewprivs.tar" $E/nonewprivs:1.3 '{"Entrypoint":["/usr/local/bin/nnp"]}'
add nonewprivs.tar $E/nonewprivs:1.3

# critest's image specs: busybox + one file named after the image -----------------------
for t in test-image-latest test-image-tag-test test-image-tag-all test-image-1 test-image-2 test-image-3 test-image-tags; do
	cp -a "$work/bb" "$work/$t"
	echo "$t" >"$work/$t/$t"
	ref=$R/$t:latest
	case $t in test-image-tag-*) ref=$R/test-image-tag:${t#test-image-tag-} ;; test-image-tags) ref=$R/$t:1 ;; esac
	mk "$work/$t" "$OUT/$t.tar" "$ref" "$CMD_SH"
done
add test-image-latest.tar $R/test-image-latest:latest
add test-image-tag-test.tar $R/test-image-tag:test
add test-image-tag-all.tar $R/test-image-tag:all
add test-image-1.tar $R/test-image-1:latest
add test-image-2.tar $R/test-image-2:latest
add test-image-3.tar $R/test-image-3:latest
add test-image-tags.tar $R/test-image-tags:1
add test-image-tags.tar $R/test-image-tags:2
add test-image-tags.tar $R/test-image-tags:3

# USER images (cri-tools images/image-user) ---------------------------------------------
for v in uid=1002 username=www-data uid-group=1003:1004 username-group=www-data:1004; do
	n=test-image-user-${v%%=*} u=${v#*=}
	mk "$work/bb" "$OUT/$n.tar" "$R/$n:latest" "$(jq -cn --arg u "$u" '{Cmd: ["sh"], User: $u}')"
	add "$n.tar" "$R/$n:latest"
done

# predefined group (cri-tools images/image-predefined-group) -------------------------------
cp -a "$work/bb" "$work/pg"
echo 'default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh' >>"$work/pg/etc/passwd"
printf 'default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n' >>"$work/pg/etc/group"
mkdir -p "$work/pg/home/default-user"
mk "$work/pg" "$OUT/test-image-predefined-group.tar" $R/test-image-predefined-group:latest '{"Cmd":["sh"],"User":"1000"}'
add test-image-predefined-group.tar $R/test-image-predefined-group:latest

# Last, so that a list newer than the kit means a complete set.
cp "$list" "$OUT/images.list.tmp"
mv "$OUT/images.list.tmp" "$OUT/images.list"
echo "images: wrote $(wc -l <"$OUT/images.list") references, $(cut -d' ' -f1 "$OUT/images.list" | sort -u | wc -l) tarballs to $OUT"
