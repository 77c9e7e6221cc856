#!/usr/bin/env bash
# registry.sh: a throw-away OCI registry on loopback, filled with the kit's stand-in images,
# so that PullImage (which talks to a registry, in every runtime) and critest work with no
# internet. The registry is go-containerregistry's (`crane registry serve`, the crane that
# tools/go.mod pins, built into bin/crane), blobs in memory: gone when it stops.
#
#   registry.sh start [IMAGEDIR]  start it (unless it runs already) and push IMAGEDIR's images
#   registry.sh push [IMAGEDIR]   push them again
#   registry.sh addr              print the address it serves on
#   registry.sh stop              stop it, by the PID it wrote
#
#   REG_ADDR  127.0.0.1:PORT to listen on (default 127.0.0.1:5000); port 0 takes a free port,
#             which `addr` then prints. Loopback only.
#   REG_RUN   where the PID, address and log go (default /run/crijournal-kit/registry-PORT;
#             required with port 0, so that stop finds the registry again)
#   IMAGEDIR  default $KIT_IMAGES (/var/tmp/crij-images), made by images.sh
#
# Each upstream reference HOST/PATH:TAG of IMAGEDIR/images.list is pushed as REG_ADDR/PATH:TAG
# from the OCI layout in its tarball, so digests stay those mkimage.sh printed. A runtime
# reaches them through mirrors of registry.k8s.io, k8s.gcr.io, gcr.io and docker.io
# (crijournal: [[registries]] prefix/location/insecure; containerd: hosts.toml).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
REG_ADDR=${REG_ADDR:-127.0.0.1:5000}
case $REG_ADDR in
127.0.0.1:[0-9]*) ;;
*) echo "registry.sh: REG_ADDR=$REG_ADDR: want 127.0.0.1:PORT (loopback only)" >&2; exit 2 ;;
esac
port=${REG_ADDR#127.0.0.1:}
if [ -z "${REG_RUN:-}" ]; then
	[ "$port" != 0 ] || { echo "registry.sh: with port 0, set REG_RUN" >&2; exit 2; }
	REG_RUN=/run/crijournal-kit/registry-$port
fi
IMAGEDIR=${2:-$KIT_IMAGES}

# running: whether the PID in REG_RUN/pid is the registry this script started.
running() {
	local pid
	[ -f "$REG_RUN/pid" ] || return 1
	pid=$(cat "$REG_RUN/pid")
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ' registry serve '
}

# addr: the address the running registry serves on ("serving on port N" in its log).
addr() {
	local p
	p=$(sed -n 's/.*serving on port \([0-9]*\)$/\1/p' "$REG_RUN/log" 2>/dev/null | tail -n 1)
	[ -n "$p" ] || return 1
	echo "127.0.0.1:$p"
}

push() {
	local crane tmp tar ref a n=0
	[ -s "$IMAGEDIR/images.list" ] || { echo "registry.sh: no $IMAGEDIR/images.list (run test/kit/images.sh $IMAGEDIR)" >&2; exit 1; }
	crane=$(kit_crane)
	a=$(addr)
	tmp=$(mktemp -d)
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" RETURN
	while read -r tar ref; do
		[ -n "$tar" ] || continue
		rm -rf "$tmp/l" && mkdir "$tmp/l" && tar -C "$tmp/l" -xf "$IMAGEDIR/$tar"
		rm -f "$tmp/l/manifest.json" # the docker-archive's: crane then reads the OCI layout
		"$crane" push --insecure "$tmp/l" "$a/${ref#*/}" >"$tmp/out" 2>&1 || {
			cat "$tmp/out" >&2
			exit 1
		}
		echo "pushed $a/${ref#*/} ($ref)"
		n=$((n + 1))
	done <"$IMAGEDIR/images.list"
	echo "registry: $n references pushed to $a"
}

case ${1:-} in
start)
	mkdir -p "$REG_RUN"
	if running; then
		echo "registry: already running, pid $(cat "$REG_RUN/pid") on $(addr)"
	else
		crane=$(kit_crane)
		: >"$REG_RUN/log"
		"$crane" registry serve --address "$REG_ADDR" >>"$REG_RUN/log" 2>&1 </dev/null &
		echo $! >"$REG_RUN/pid"
		for _ in $(seq 100); do addr >/dev/null && break; sleep 0.1; done
		addr >/dev/null || { echo "registry.sh: crane registry serve did not start:" >&2; cat "$REG_RUN/log" >&2; exit 1; }
		echo "registry: pid $(cat "$REG_RUN/pid") on $(addr)"
	fi
	push
	;;
push) push ;;
addr)
	if ! running; then
		echo "registry.sh: no registry running (REG_RUN=$REG_RUN)" >&2
		exit 1
	fi
	addr
	;;
stop)
	if running; then
		pid=$(cat "$REG_RUN/pid")
		kill "$pid"
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		echo "registry: stopped pid $pid"
	fi
	rm -f "$REG_RUN/pid"
	;;
*) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
