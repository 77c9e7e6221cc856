#!/bin/bash
# containerd.sh: crijournal against containerd, as ratios measured in one run.
#
# Starts a crijournal daemon and Debian's containerd 1.6 (`apt-get install containerd`,
# its CRI plugin, overlayfs snapshotter, runc) side by side, each on private paths with a
# bridge network of its own, gives both the busybox image (crijournal pulls it from the
# loopback registry $REG_ADDR, containerd imports the tarballs of $IMAGEDIR; both made
# by the conformance kit, $KIT (default ../shared/conformance beside the repository): mk-local-images.sh and local-registry.sh), then runs
# `crijournal-bench --compare-endpoint` (the workload alternates between the two, round
# by round) with the floor measured after each round, and prints the ratios. Then it
# stops both daemons by PID and removes what they made. Run as root from the repository,
# after `make build`. Arguments go to `crijournal-bench` (default: -n 20 -c 1 --rounds 4).
#
#   contrib/bench/containerd.sh -n 20 -c 4 --rounds 4
#   contrib/bench/containerd.sh --workload idle -n 100 --duration 60s
# With --workload (idle, scale), the workload runs on crijournal, then on containerd.
#
# Both run the same OCI runtime binary: CONTAINERD_RUNC, by default the runc crijournal's
# handlers run (the project's, /usr/local/libexec/crijournal/runc, when `make deps` put it
# there; the floor runs it too), so that the ratios compare the two daemons and not two
# runc releases (Debian's runc 1.1 creates a container about 25 ms faster than 1.3 here).
# CONTAINERD_RUNC="$(command -v runc)" gives containerd Debian's, as before issue 24.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-n 20 -c 1 --rounds 4)
IMAGE="${IMAGE:-docker.io/library/busybox:latest}"
IMAGEDIR="${IMAGEDIR:-/var/tmp/crij-images}"
KIT="${KIT:-$(cd "$(dirname "$0")/../.." && pwd)/../shared/conformance}"
for c in containerd ctr jq crictl; do
	command -v "$c" >/dev/null || { echo "$0: no $c (apt-get install containerd jq; crictl: make deps)" >&2; exit 1; }
done
[ -f "$IMAGEDIR/busybox.tar" ] && [ -f "$IMAGEDIR/pause-sandbox.tar" ] || {
	echo "$0: no image tarballs in $IMAGEDIR: run $KIT/mk-local-images.sh $IMAGEDIR" >&2
	exit 1
}

bundled_runc=/usr/local/libexec/crijournal/runc # config.BundledRunc
if [ -z "${CONTAINERD_RUNC:-}" ]; then
	if [ -x "$bundled_runc" ]; then CONTAINERD_RUNC="$bundled_runc"; else CONTAINERD_RUNC="$(command -v runc)"; fi
fi
echo "containerd's runc: $CONTAINERD_RUNC ($("$CONTAINERD_RUNC" --version | head -n 1))" >&2

mirror_config "$base/crijournal.toml"
DAEMON_CONFIG="$base/crijournal.toml" start_daemon cj 6
pull cj "$IMAGE"

# containerd, on paths of its own: root and CNI under $base/ctd, state and socket under a
# short run root (shim sockets live there).
ctd="$base/ctd"
ctdrun="$(mktemp -d /run/cjb-ctd-XXXXXX)"
ctdsock="$ctdrun/containerd.sock"
ctdpid=""
stop_containerd() {
	[ -n "$ctdpid" ] || return 0
	rmp "unix://$ctdsock"
	kill "$ctdpid" 2>/dev/null || true
	while kill -0 "$ctdpid" 2>/dev/null; do sleep 0.1; done
	# Shims outlive containerd by design; each wrote its PID in its task's bundle.
	for f in "$ctdrun"/state/io.containerd.runtime.v2.task/*/*/shim.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
	done
	if [ -d "$ctdrun/runc/k8s.io" ]; then
		for c in $("$CONTAINERD_RUNC" --root "$ctdrun/runc/k8s.io" list -q 2>/dev/null); do
			"$CONTAINERD_RUNC" --root "$ctdrun/runc/k8s.io" delete --force "$c" 2>/dev/null || true
		done
	fi
	grep -E " ($ctd|$ctdrun)/" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m" || true; done
	ip link del cjb-ctd 2>/dev/null || true
	rm -rf "$ctdrun"
}
cleanups+=(stop_containerd)

mkdir -p "$ctd/net.d" "$ctd/certs.d"
cat >"$ctd/net.d/10-bench.conflist" <<CONF
{"cniVersion": "1.0.0", "name": "cj-bench-ctd", "plugins": [{"type": "bridge", "bridge": "cjb-ctd",
 "isGateway": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "${CTD_SUBNET:-10.250.7.0/24}"}]],
 "dataDir": "$ctd/ipam"}}]}
CONF
cnibin=/usr/lib/cni
[ -x /opt/cni/bin/bridge ] && cnibin=/opt/cni/bin
cat >"$ctd/config.toml" <<EOF
version = 2
root = "$ctd/root"
state = "$ctdrun/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$ctdsock"
[ttrpc]
  address = "$ctdsock.ttrpc"
[debug]
  address = "$ctdrun/debug.sock"
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$ctd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  # no CAP_SYS_RESOURCE here: the sandbox's oom_score_adj -998 would fail in runc
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$CONTAINERD_RUNC"
        Root = "$ctdrun/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cnibin"
    conf_dir = "$ctd/net.d"
    max_conf_num = 1
EOF
containerd --config "$ctd/config.toml" >"$ctd/containerd.log" 2>&1 &
ctdpid=$!
for _ in $(seq 100); do [ -S "$ctdsock" ] && ctr -a "$ctdsock" version >/dev/null 2>&1 && break; sleep 0.1; done
ctr -a "$ctdsock" version >/dev/null 2>&1 || { echo "$0: containerd did not start:" >&2; cat "$ctd/containerd.log" >&2; exit 1; }
for t in pause-sandbox.tar busybox.tar; do
	ctr -a "$ctdsock" -n k8s.io images import --snapshotter overlayfs "$IMAGEDIR/$t" >/dev/null
done
# ctr imports the name inside the tarball; give the image the name bench asks for too
first=$(tar -xOf "$IMAGEDIR/busybox.tar" index.json | jq -r '.manifests[0].annotations["io.containerd.image.name"]')
[ "$first" = "$IMAGE" ] || ctr -a "$ctdsock" -n k8s.io images tag --force "$first" "$IMAGE" >/dev/null

echo "crijournal: unix://$base/cj/cri.sock (pid ${pids[0]}); containerd: unix://$ctdsock (pid $ctdpid)" >&2
if [[ " ${args[*]} " == *" --workload "* ]]; then
	for endpoint in "unix://$base/cj/cri.sock" "unix://$ctdsock"; do
		"$bench" --endpoint "$endpoint" --image "$IMAGE" "${args[@]}"
	done
else
	"$bench" --endpoint "unix://$base/cj/cri.sock" --compare-endpoint "unix://$ctdsock" \
		--image "$IMAGE" --floor "${args[@]}"
fi
