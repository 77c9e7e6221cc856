#!/bin/bash
# containerd.sh: crijournal against containerd, as ratios measured in one run.
#
# Starts a crijournal daemon and containerd side by side, each on private paths with a
# bridge network of its own, gives both the busybox image (crijournal pulls it from the
# loopback registry $REG_ADDR, containerd imports the tarballs of $IMAGEDIR, default
# /var/tmp/crij-images; both from the project's kit, test/kit: images.sh builds the
# tarballs when missing, and without REG_ADDR lib.sh starts registry.sh for the run),
# then runs `crijournal-bench --compare-endpoint` (the workload alternates between the
# daemons, round by round) with the floor measured after each round, and prints the
# ratios. Then it stops every daemon by PID and removes what they made. Run as root from
# the repository, after `make build` and `make bench-deps`. Other arguments go to
# `crijournal-bench` (default: -n 20 -c 1 --rounds 4).
#
# --containerd picks the containerd (anywhere among the arguments):
#   2     containerd 2.x, the anchor of the targets (issue 42): the containerd,
#         containerd-shim-runc-v2 and ctr of $CONTAINERD2_DIR (default
#         /usr/local/libexec/crijournal/containerd-2.4.2, where `make bench-deps` builds
#         2.4.2 with `go install -tags no_btrfs`); configuration version 3. The default.
#   1.6   Debian's containerd 1.6 (`apt-get install containerd`); configuration version 2.
#   both  both, as two baselines of one run: each round runs crijournal, containerd 1.6
#         and 2.x in turn, and the report gives crijournal's ratios to each.
#
#   contrib/bench/containerd.sh -n 20 -c 4 --rounds 4
#   contrib/bench/containerd.sh --containerd both -n 20 -c 1 --rounds 4
#   contrib/bench/containerd.sh --containerd both --workload idle -n 100 --duration 60s
# With --workload (idle, scale), the workload runs on crijournal, then on each containerd.
#
# Every daemon runs the same OCI runtime binary: CONTAINERD_RUNC, by default the runc
# crijournal's handlers run (the project's, /usr/local/libexec/crijournal/runc, when `make
# deps` put it there; the floor runs it too), so that the ratios compare the daemons and
# not runc releases (Debian's runc 1.1 creates a container about 25 ms faster than 1.3
# here). CONTAINERD_RUNC="$(command -v runc)" gives containerd Debian's, as before issue 24.
# Each containerd runs its own release's shim: containerd looks a runtime's shim up in
# PATH first, so it is started with its own directory first in PATH.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/containerd-config.sh"
which=2
args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--containerd)
		[ $# -ge 2 ] || { echo "$0: --containerd needs 1.6, 2 or both" >&2; exit 2; }
		which="$2"
		shift 2
		;;
	--containerd=*) which="${1#*=}"; shift ;;
	*) args+=("$1"); shift ;;
	esac
done
case "$which" in
1.6 | 2) wanted=("$which") ;;
both) wanted=(1.6 2) ;;
*) echo "$0: --containerd $which: want 1.6, 2 or both" >&2; exit 2 ;;
esac
[ ${#args[@]} -gt 0 ] || args=(-n 20 -c 1 --rounds 4)
IMAGE="${IMAGE:-docker.io/library/busybox:latest}"
IMAGEDIR="${IMAGEDIR:-${KIT_IMAGES:-/var/tmp/crij-images}}"
export KIT_IMAGES="$IMAGEDIR" # the registry lib.sh starts pushes these
CONTAINERD2_DIR="${CONTAINERD2_DIR:-/usr/local/libexec/crijournal/containerd-2.4.2}"
for c in jq crictl; do
	command -v "$c" >/dev/null || { echo "$0: no $c (apt-get install jq; crictl: make deps)" >&2; exit 1; }
done
# bindir <version>: where that containerd's binaries are.
bindir() { if [ "$1" = 1.6 ]; then echo /usr/bin; else echo "$CONTAINERD2_DIR"; fi; }
for v in "${wanted[@]}"; do
	for c in containerd containerd-shim-runc-v2 ctr; do
		[ -x "$(bindir "$v")/$c" ] || {
			echo "$0: no $(bindir "$v")/$c for containerd $v: run make bench-deps" >&2
			exit 1
		}
	done
done
"$kit/images.sh" "$IMAGEDIR" >&2 # nothing when they are there already

bundled_runc=/usr/local/libexec/crijournal/runc # config.BundledRunc
if [ -z "${CONTAINERD_RUNC:-}" ]; then
	if [ -x "$bundled_runc" ]; then CONTAINERD_RUNC="$bundled_runc"; else CONTAINERD_RUNC="$(command -v runc)"; fi
fi
echo "containerd's runc: $CONTAINERD_RUNC ($("$CONTAINERD_RUNC" --version | head -n 1))" >&2

mirror_config "$base/crijournal.toml"
DAEMON_CONFIG="$base/crijournal.toml" start_daemon cj 6
pull cj "$IMAGE"

# stop_containerds stops every containerd started, by PID, and what it left: shims
# outlive containerd by design (each wrote its PID in its task's bundle), and so may
# containers.
ctd_stops=() # "pid socket runroot dir side" of each containerd started
stop_containerds() {
	local entry ctdpid ctdsock ctdrun ctd side f c
	for entry in "${ctd_stops[@]}"; do
		read -r ctdpid ctdsock ctdrun ctd side <<<"$entry"
		rmp "unix://$ctdsock"
		kill "$ctdpid" 2>/dev/null || true
		while kill -0 "$ctdpid" 2>/dev/null; do sleep 0.1; done
		for f in "$ctdrun"/state/io.containerd.runtime.v2.task/*/*/shim.pid; do
			[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
		done
		if [ -d "$ctdrun/runc/k8s.io" ]; then
			for c in $("$CONTAINERD_RUNC" --root "$ctdrun/runc/k8s.io" list -q 2>/dev/null); do
				"$CONTAINERD_RUNC" --root "$ctdrun/runc/k8s.io" delete --force "$c" 2>/dev/null || true
			done
		fi
		grep -E " ($ctd|$ctdrun)/" /proc/mounts | awk '{print $2}' | sort -r | while read -r m; do umount -l "$m" || true; done
		ip link del "cjb-$side" 2>/dev/null || true
		rm -rf "$ctdrun"
	done
}
cleanups+=(stop_containerds)

# write_config <version> <file> <dir> <run root> <socket> <CNI plugins>: containerd's
# configuration, of the shape its version reads.
write_config() {
	local version="$1" file="$2" ctd="$3" ctdrun="$4" ctdsock="$5" cnibin="$6"
	if [ "$version" = 1.6 ]; then
		{
		cat <<EOF
version = 2
root = "$ctd/root"
state = "$ctdrun/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
EOF
		containerd_listen_sections "$ctd" "$ctdrun" "$ctdsock"
		cat <<EOF
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
		} >"$file"
		return
	fi
	containerd_v3_config "$file" "$ctd" "$ctdrun" "$ctdsock" "$cnibin" "$CONTAINERD_RUNC" registry.k8s.io/pause:3.10
}

# start_containerd <version 1.6|2> <side> <subnet>: a containerd on paths of its own, root
# and CNI under $base/<side>, state and socket under a short run root (shim sockets live
# there); its endpoint is appended to ctd_endpoints.
ctd_endpoints=()
ctd_labels=()
start_containerd() {
	local version="$1" side="$2" subnet="$3" bin ctd ctdrun ctdsock ctdpid first
	bin="$(bindir "$version")"
	ctd="$base/$side"
	ctdrun="$(mktemp -d "/run/cjb-$side-XXXXXX")"
	ctdsock="$ctdrun/containerd.sock"
	mkdir -p "$ctd/net.d"
	cat >"$ctd/net.d/10-bench.conflist" <<CONF
{"cniVersion": "1.0.0", "name": "cj-bench-$side", "plugins": [{"type": "bridge", "bridge": "cjb-$side",
 "isGateway": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "$subnet"}]],
 "dataDir": "$ctd/ipam"}}]}
CONF
	local cnibin=/usr/lib/cni
	[ -x /opt/cni/bin/bridge ] && cnibin=/opt/cni/bin
	write_config "$version" "$ctd/config.toml" "$ctd" "$ctdrun" "$ctdsock" "$cnibin"
	PATH="$bin:$PATH" "$bin/containerd" --config "$ctd/config.toml" >"$ctd/containerd.log" 2>&1 &
	ctdpid=$!
	ctd_stops+=("$ctdpid $ctdsock $ctdrun $ctd $side")
	for _ in $(seq 100); do [ -S "$ctdsock" ] && "$bin/ctr" -a "$ctdsock" version >/dev/null 2>&1 && break; sleep 0.1; done
	"$bin/ctr" -a "$ctdsock" version >/dev/null 2>&1 || {
		echo "$0: containerd $version did not start:" >&2
		cat "$ctd/containerd.log" >&2
		exit 1
	}
	for t in pause-sandbox.tar busybox.tar; do
		"$bin/ctr" -a "$ctdsock" -n k8s.io images import --snapshotter overlayfs "$IMAGEDIR/$t" >/dev/null
	done
	# ctr imports the name inside the tarball; give the image the name bench asks for too
	first=$(tar -xOf "$IMAGEDIR/busybox.tar" index.json | jq -r '.manifests[0].annotations["io.containerd.image.name"]')
	[ "$first" = "$IMAGE" ] || "$bin/ctr" -a "$ctdsock" -n k8s.io images tag --force "$first" "$IMAGE" >/dev/null
	ctd_endpoints+=("unix://$ctdsock")
	ctd_labels+=("containerd $("$bin/containerd" --version | awk '{print $3}'): unix://$ctdsock (pid $ctdpid)")
}

for v in "${wanted[@]}"; do
	if [ "$v" = 1.6 ]; then
		start_containerd 1.6 ctd "${CTD_SUBNET:-10.250.7.0/24}"
	else
		start_containerd 2 ctd2 "${CTD2_SUBNET:-10.250.9.0/24}"
	fi
done

echo "crijournal: unix://$base/cj/cri.sock (pid ${pids[0]})" >&2
for l in "${ctd_labels[@]}"; do echo "$l" >&2; done
if [[ " ${args[*]} " == *" --workload "* ]]; then
	for endpoint in "unix://$base/cj/cri.sock" "${ctd_endpoints[@]}"; do
		"$bench" --endpoint "$endpoint" --image "$IMAGE" "${args[@]}"
	done
else
	compare=()
	for e in "${ctd_endpoints[@]}"; do compare+=(--compare-endpoint "$e"); done
	"$bench" --endpoint "unix://$base/cj/cri.sock" "${compare[@]}" \
		--image "$IMAGE" --floor "${args[@]}"
fi
