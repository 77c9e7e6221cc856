#!/usr/bin/env bash
# run.sh [extra e2e_node.test flags] — the kubelet's node conformance suite against crijournal
# (issue 23). As root, after `make build node-e2e-build` (`make node-e2e` does both and runs this).
#
# It builds the stand-in images (mk-images.sh, cached in $IMAGES), serves them from a loopback
# registry ($REG_ADDR: test/kit/registry.sh, the crane of tools/go.mod), starts bin/crijournal
# on private paths under a temporary directory (its own socket, root, CNI network,
# registries.conf), writes the base kubelet configuration this node needs, and runs
# bin/e2e_node.test, which starts etcd and the kube-apiserver in-process and bin/kubelet as
# a child, with the focus and skip below. Results (junit, logs, the kubelet's and the
# daemon's) go to $RESULTS.
#
#   ONLY    a regex: only the focused specs it matches (FOCUS='(ONLY).*\[NodeConformance\]')
#   FOCUS   ginkgo focus   (default '\[NodeConformance\]'; replaces it, so a FOCUS of your own
#           runs specs outside the conformance set too: prefer ONLY)
#   SKIP    ginkgo skip    (default '\[Flaky\]|\[Slow\]|\[Serial\]')
#   RESULTS report dir     (default _output/node-e2e/<time>)
#   IMAGES  stand-in image cache (default /var/tmp/crij-node-e2e-images)
#   REG_ADDR loopback registry (default 127.0.0.1:5055)
#   KEEP=1  keep the temporary directory
#   NODES   parallel ginkgo processes (default 8, as upstream's node e2e jobs on 2-vCPU
#           machines; bin/ginkgo runs them and process 1 starts the services); 1 runs the
#           test binary alone (then ginkgo flags go in as --ginkgo.x)
# Extra arguments go to e2e_node.test, e.g. --ginkgo.dry-run, --ginkgo.focus=... (later wins).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=$ROOT/bin
KIT=$ROOT/test/kit
FOCUS=${FOCUS:-'\[NodeConformance\]'}
[ -z "${ONLY:-}" ] || FOCUS="($ONLY).*\[NodeConformance\]"
SKIP=${SKIP:-'\[Flaky\]|\[Slow\]|\[Serial\]'}
NODES=${NODES:-8}
RESULTS=${RESULTS:-$ROOT/_output/node-e2e/$(date +%Y%m%dT%H%M%S)}
IMAGES=${IMAGES:-/var/tmp/crij-node-e2e-images}
export REG_ADDR=${REG_ADDR:-127.0.0.1:5055}

[ "$(id -u)" -eq 0 ] || { echo "run.sh: must run as root" >&2; exit 1; }
for b in crijournal crijournal-pause crijournal-pause-sleep kubelet e2e_node.test agnhost nonewprivs ginkgo; do
	[ -x "$BIN/$b" ] || { echo "run.sh: $BIN/$b missing: make build node-e2e-build" >&2; exit 1; }
done
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
WORK=$(mktemp -d /var/tmp/crij-node-e2e.XXXXXX)
# searchable by others: user-namespaced pods (hostUsers: false) reach their root
# filesystems under it through an idmapped mount (mktemp makes it 0700)
chmod 0711 "$WORK"
export REG_RUN=$WORK/registry
DAEMON_PID=
NAT_RULES=()
SOCK=$WORK/run/crijournal.sock

cleanup() {
	local rc=$?
	set +e
	if [ -n "$DAEMON_PID" ]; then
		# pods the suite left: their conmons and containers would outlive the daemon
		crictl --config "$WORK/crictl.yaml" rmp -fa >/dev/null 2>&1
		kill -TERM "$DAEMON_PID" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$DAEMON_PID" 2>/dev/null
		# what the suite's pods left on the node, as the daemon's own leak check sees it
		# (non-zero: something leaked; the list is in leaks.txt)
		if ! "$BIN/crijournal" inspect --config "$WORK/crijournal.toml" --leaks >"$RESULTS/leaks.txt" 2>&1; then
			echo "run.sh: the node holds what no journal record owns: see $RESULTS/leaks.txt" >&2
		fi
	fi
	# the daemon's runtime state directories, which are under /run when $WORK/run/oci-<handler>
	# is too long for conmon's socket paths: the daemon says where (layout.StateDirFor)
	local state_dirs=()
	[ -f "$WORK/crijournal.toml" ] && mapfile -t state_dirs < <("$BIN/crijournal" inspect --config "$WORK/crijournal.toml" --paths 2>/dev/null |
		jq -r '.handlers[].conmon_state' 2>/dev/null)
	"$KIT/registry.sh" stop >/dev/null 2>&1
	for r in "${NAT_RULES[@]}"; do iptables -t nat -D OUTPUT $r 2>/dev/null; done
	# the network the daemon's pods used: nothing should be left, the bridge is ours
	ip link del cnie2e0 2>/dev/null
	if [ "${KEEP:-0}" = 1 ]; then echo "run.sh: kept $WORK"; else
		if grep -q " $WORK/" /proc/self/mountinfo; then
			echo "run.sh: mounts left under $WORK (kept)" >&2
		else
			rm -rf "$WORK"
			for d in "${state_dirs[@]}"; do
				case "$d" in /run/cjo-*) rm -rf "$d" ;; esac
			done
		fi
	fi
	exit $rc
}
trap cleanup EXIT INT TERM

# 1. images ------------------------------------------------------------------------------
if [ ! -s "$IMAGES/images.list" ] || [ "$BIN/agnhost" -nt "$IMAGES/images.list" ] ||
	[ -n "$(find "$HERE/mk-images.sh" "$KIT"/{images.sh,mkimage.sh,pause.c,nnp.c} -newer "$IMAGES/images.list")" ]; then
	"$HERE/mk-images.sh" "$IMAGES"
fi
"$KIT/registry.sh" start "$IMAGES" >"$RESULTS/registry-push.log"

# 2. the daemon, on private paths --------------------------------------------------------
mkdir -p "$WORK/cni" "$WORK/registries.conf.d" "$WORK/run"
jq --arg d "$WORK/cni-ipam" '.name = "crij-node-e2e" | .plugins[0].bridge = "cnie2e0" |
	.plugins[0].ipam.ranges = [[{subnet: "10.100.0.0/24"}]] | .plugins[0].ipam.dataDir = $d' \
	"$ROOT/contrib/cni/10-crijournal-bridge.conflist" >"$WORK/cni/10-node-e2e.conflist"
cat >"$WORK/registries.conf" <<REG
[[registry]]
location = "$REG_ADDR"
insecure = true
REG
{
	cat <<CFG
root = "$WORK/root"
run_root = "$WORK/run"
socket = "$SOCK"
namespace_dir = "$WORK/run/ns"
cni_conf_dir = "$WORK/cni"
cni_cache_dir = "$WORK/cni-cache"
registries_conf = "$WORK/registries.conf"
registries_conf_dir = "$WORK/registries.conf.d"
signature_policy = "$ROOT/contrib/containers/policy.json"
cgroup_manager = "cgroupfs"
enable_nri = false

# the RuntimeClass handler the suite's RuntimeClass and PodOverhead specs name (upstream's
# node e2e jobs configure their runtime with it, as runc)
[runtimes.test-handler]
CFG
	# names the suite does not map through KUBE_TEST_REPO_LIST (hard-coded references)
	for h in registry.k8s.io gcr.io k8s.gcr.io docker.io; do
		printf '\n[[registries]]\nprefix = "%s"\nlocation = "%s"\ninsecure = true\n' "$h" "$REG_ADDR"
	done
} >"$WORK/crijournal.toml"
"$BIN/crijournal" serve --config "$WORK/crijournal.toml" >"$RESULTS/crijournal.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
[ -S "$SOCK" ] || { echo "run.sh: the daemon did not start, see $RESULTS/crijournal.log" >&2; exit 1; }

# 3. the suite's image names, mapped to the loopback registry ------------------------------
cat >"$WORK/repo-list.yaml" <<YAML
promoterE2eRegistry: $REG_ADDR/e2e-test-images
buildImageRegistry: $REG_ADDR/build-image
gcEtcdRegistry: $REG_ADDR
gcRegistry: $REG_ADDR
sigStorageRegistry: $REG_ADDR/sig-storage
dockerLibraryRegistry: $REG_ADDR/library
cloudProviderGcpRegistry: $REG_ADDR/cloud-provider-gcp
YAML
export KUBE_TEST_REPO_LIST=$WORK/repo-list.yaml
# The suite's own pre-pull wants images that cannot be made here (a digest-pinned busybox,
# cadvisor, node-perf, the node problem detector: IMAGES.md); pull the stand-ins instead.
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n' "$SOCK" "$SOCK" >"$WORK/crictl.yaml"
while read -r _ ref; do
	crictl --config "$WORK/crictl.yaml" pull "$REG_ADDR/${ref#*/}" >/dev/null
done <"$IMAGES/images.list"

# 4. the kubelet, on loopback only. The suite's apiserver reaches it at the node's InternalIP
# (the kubelet refuses a loopback node IP): this host's own connections to NODE_IP:10250 and
# :10255 are sent to 127.0.0.1 (nat OUTPUT, removed at the end; nothing from outside reaches it).
NODE_IP=${NODE_IP:-$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')}
[ -n "$NODE_IP" ] || { echo "run.sh: no node IP (set NODE_IP)" >&2; exit 1; }
for port in 10250 10255; do
	r="-p tcp -d $NODE_IP --dport $port -m comment --comment crij-node-e2e -j DNAT --to-destination 127.0.0.1:$port"
	iptables -t nat -I OUTPUT $r
	NAT_RULES+=("$r")
done

# the kubelet's base configuration (the suite adds its own settings on top) -------------
cat >"$WORK/kubelet-base.yaml" <<KC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
# this node: cgroup v1 (the 1.37 kubelet refuses it unless told), cgroupfs, no systemd
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /
# leave the host's sysctls as they are (the kubelet checks them instead of setting them)
protectKernelDefaults: true
# test/e2e_node/jenkins/default-kubelet-config.yaml
podCIDR: "10.100.0.0/24"
volumeStatsAggPeriod: 10s
fileCheckFrequency: 10s
evictionPressureTransitionPeriod: 30s
evictionHard:
  memory.available: 250Mi
  nodefs.available: 10%
  nodefs.inodesFree: 5%
evictionMinimumReclaim:
  nodefs.available: 5%
  nodefs.inodesFree: 5%
serializeImagePulls: false
KC

# 5. the suite --------------------------------------------------------------------------
# bin/kubelet is found beside bin/e2e_node.test. Without systemd-run in PATH the suite starts the kubelet as its own child rather than as a
# transient systemd unit (PID 1 is not systemd here); journalctl hidden too, so that it copies
# log files instead of asking journald. The rest of PATH is the usual one, link by link.
mkdir -p "$WORK/path"
for d in /usr/local/go/bin /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
	[ -d "$d" ] || continue
	for f in "$d"/*; do
		n=${f##*/}
		case $n in systemd-run | systemctl | journalctl) continue ;; esac
		[ -x "$f" ] && [ ! -e "$WORK/path/$n" ] && ln -s "$f" "$WORK/path/$n"
	done
done
# The suite's non-systemd defaults move every host process into /system and name a
# /docker-daemon runtime cgroup: not on a shared machine, and there is no such daemon.
KUBELET_FLAGS="--system-cgroups= --runtime-cgroups= --kubelet-cgroups= --node-ip=$NODE_IP"
cd "$WORK"
set +e
SUITE_FLAGS=(
	--container-runtime-endpoint="unix://$SOCK" --image-service-endpoint="unix://$SOCK"
	--kubelet-config-file="$WORK/kubelet-base.yaml" --kubelet-flags="$KUBELET_FLAGS"
	--prepull-images=false
	--report-dir="$RESULTS"
)
if [ "$NODES" -gt 1 ]; then
	PATH=$WORK/path "$BIN/ginkgo" --procs="$NODES" \
		--focus="$FOCUS" --skip="$SKIP" \
		--junit-report="$RESULTS/junit.xml" --timeout=3h --no-color \
		"$BIN/e2e_node.test" -- "${SUITE_FLAGS[@]}" "$@" 2>&1 | tee "$RESULTS/e2e_node.log"
else
	PATH=$WORK/path "$BIN/e2e_node.test" "${SUITE_FLAGS[@]}" \
		--ginkgo.focus="$FOCUS" --ginkgo.skip="$SKIP" \
		--ginkgo.junit-report="$RESULTS/junit.xml" --ginkgo.timeout=3h --ginkgo.no-color \
		"$@" 2>&1 | tee "$RESULTS/e2e_node.log"
fi
rc=${PIPESTATUS[0]}
set -e
cp -a "$WORK"/kubelet-config "$WORK"/kubelet.log "$RESULTS/" 2>/dev/null || true
if [ -s "$RESULTS/junit.xml" ]; then
	python3 - "$RESULTS/junit.xml" <<'PY' | tee "$RESULTS/summary.txt"
# Specs only ([It]); "filtered" = not selected by focus/skip (ginkgo's plain "skipped"),
# "skipped" = selected but skipped at run time (the reason follows "skipped - ").
import sys, xml.etree.ElementTree as ET
p = f = s = filt = 0
lines = []
for c in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    name = c.get("name", "")
    if not name.startswith("[It] "):
        if c.find("failure") is not None or c.find("error") is not None:
            lines.append("FAIL " + name)
        continue
    name = name[5:]
    sk, fl = c.find("skipped"), c.find("failure")
    if fl is None:
        fl = c.find("error")
    if sk is not None:
        msg = sk.get("message") or ""
        if msg == "skipped":
            filt += 1
        else:
            s += 1
            lines.append("SKIP " + name + " :: " + msg.replace("skipped - ", "", 1).splitlines()[0][:200])
    elif fl is not None:
        f += 1
        msg = (fl.get("message") or fl.text or "").strip().splitlines()
        lines.append("FAIL " + name + " :: " + (msg[0][:200] if msg else ""))
    else:
        p += 1
print("\n".join(lines))
print(f"passed {p}, failed {f}, skipped {s} (of {p + f + s} selected; {filt} not selected)")
PY
fi
echo "run.sh: results in $RESULTS (exit $rc)"
exit $rc
