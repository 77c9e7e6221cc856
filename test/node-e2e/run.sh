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
#           FOCUS=density: the Density and Resource-usage specs (issue 52; [Serial], [Slow],
#           the asserting ones [Flaky], and the [Benchmark] ones), one process; ONLY narrows
#           them (FOCUS='\[sig-node\] (Density|Resource-usage).*(ONLY)')
#   SKIP    ginkgo skip    (default '\[Flaky\]|\[Slow\]|\[Serial\]'; with FOCUS=density,
#           $DENSITY_EXCLUDED: the "higher API QPS" specs, which change the kubelet's
#           configuration and restart it with `sudo systemctl restart kubelet-*.service`;
#           here the suite runs the kubelet itself, as a child, and there is no such unit,
#           so they fail in their setup and the cAdvisor pod of the specs after them with it)
#   RUNTIME crijournal (default) or containerd (2.x, make bench-deps): see runtimes.sh
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
# the density specs this harness cannot run (see SKIP above); density-compare.sh reads it too
DENSITY_EXCLUDED='with higher API QPS'
if [ "$FOCUS" = density ]; then
	# The density suites (test/e2e_node density_test.go, resource_usage_test.go) are all
	# [Serial]: one process, nothing skipped.
	FOCUS="\[sig-node\] (Density|Resource-usage).*(${ONLY:-})"
	SKIP=${SKIP:-$DENSITY_EXCLUDED}
	NODES=${NODES:-1}
	DENSITY=1
else
	[ -z "${ONLY:-}" ] || FOCUS="($ONLY).*\[NodeConformance\]"
	DENSITY=0
fi
SKIP=${SKIP:-'\[Flaky\]|\[Slow\]|\[Serial\]'}
NODES=${NODES:-8}
RESULTS=${RESULTS:-$ROOT/_output/node-e2e/$(date +%Y%m%dT%H%M%S)}
IMAGES=${IMAGES:-/var/tmp/crij-node-e2e-images}
export REG_ADDR=${REG_ADDR:-127.0.0.1:5055}

[ "$(id -u)" -eq 0 ] || { echo "run.sh: must run as root" >&2; exit 1; }
for b in crijournal crijournal-pause crijournal-pause-sleep kubelet e2e_node.test agnhost nonewprivs ginkgo cadvisor; do
	[ -x "$BIN/$b" ] || { echo "run.sh: $BIN/$b missing: make build node-e2e-build" >&2; exit 1; }
done
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
WORK=$(mktemp -d /var/tmp/crij-node-e2e.XXXXXX)
# searchable by others: user-namespaced pods (hostUsers: false) reach their root
# filesystems under it through an idmapped mount (mktemp makes it 0700)
chmod 0711 "$WORK"
export REG_RUN=$WORK/registry
NAT_RULES=()
# shellcheck source=runtimes.sh
source "$HERE/runtimes.sh"

cleanup() {
	local rc=$?
	set +e
	stop_runtime
	# the daemon's runtime state directories, which are under /run when $WORK/run/oci-<handler>
	# is too long for conmon's socket paths: the daemon says where (layout.StateDirFor)
	local state_dirs=()
	[ -f "$WORK/crijournal.toml" ] && mapfile -t state_dirs < <("$BIN/crijournal" inspect --config "$WORK/crijournal.toml" --paths 2>/dev/null |
		jq -r '.handlers[].conmon_state' 2>/dev/null)
	"$KIT/registry.sh" stop >/dev/null 2>&1
	for r in "${NAT_RULES[@]}"; do iptables -t nat -D OUTPUT $r 2>/dev/null; done
	# the network the daemon's pods used: nothing should be left, the bridge is ours
	ip link del cnie2e0 2>/dev/null
	# the cAdvisor pod's hostPath /var/lib/docker, which the runtime made (empty) if missing
	[ "${DOCKER_DIR_MADE:-0}" = 1 ] && rmdir /var/lib/docker 2>/dev/null
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

if [ "$DENSITY" = 1 ]; then
	[ -e /var/lib/docker ] || DOCKER_DIR_MADE=1
	# The suite finds the kubelet it measures by its process name (pidof kubelet, the
	# lowest PID): another kubelet on this machine may be taken for it.
	others=$(pgrep -x kubelet || true)
	[ -z "$others" ] || echo "run.sh: warning: kubelets already run here (PIDs $others): the density suites may measure one of them" >&2
fi

# 1. images ------------------------------------------------------------------------------
if [ ! -s "$IMAGES/images.list" ] || [ "$BIN/agnhost" -nt "$IMAGES/images.list" ] || [ "$BIN/cadvisor" -nt "$IMAGES/images.list" ] ||
	[ -n "$(find "$HERE/mk-images.sh" "$KIT"/{images.sh,mkimage.sh,pause.c,nnp.c} -newer "$IMAGES/images.list")" ]; then
	"$HERE/mk-images.sh" "$IMAGES"
fi
"$KIT/registry.sh" start "$IMAGES" >"$RESULTS/registry-push.log"

# 2. the runtime, on private paths, in a cgroup of its own (runtimes.sh) ---------------------
start_runtime
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n' "$SOCK" "$SOCK" >"$WORK/crictl.yaml"
echo "run.sh: $RUNTIME_LABEL, pid $RUNTIME_PID (pid file $RUNTIME_PIDFILE), cgroup $CG/runtime" | tee "$RESULTS/runtime.txt"

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
while read -r _ ref; do
	crictl --config "$WORK/crictl.yaml" pull "$REG_ADDR/${ref#*/}" >/dev/null
done <"$IMAGES/images.list"
# the density suites' cAdvisor pod names its image by a hard-coded reference (through the
# runtime's mirrors), pulled before the specs so that no spec's figures include its pull
[ "$DENSITY" = 0 ] || crictl --config "$WORK/crictl.yaml" pull gcr.io/cadvisor/cadvisor:v0.47.2 >/dev/null

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
# bin/kubelet is found beside the suite's binary ($WORK/k8s-bin, below). Without systemd-run in PATH the suite starts the kubelet as its own child rather than as a
# transient systemd unit (PID 1 is not systemd here); journalctl hidden too, so that it copies
# log files instead of asking journald. The rest of PATH is the usual one, link by link.
# (One ln a directory: one a program took minutes on a busy machine.)
mkdir -p "$WORK/path"
declare -A linked=([systemd-run]=1 [systemctl]=1 [journalctl]=1)
for d in /usr/local/go/bin /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
	[ -d "$d" ] || continue
	batch=()
	for f in "$d"/*; do
		n=${f##*/}
		[ -x "$f" ] && [ -z "${linked[$n]:-}" ] || continue
		linked[$n]=1
		batch+=("$f")
	done
	[ ${#batch[@]} -eq 0 ] || ln -s -t "$WORK/path" "${batch[@]}"
done
# The suite's non-systemd defaults move every host process into /system and name a
# /docker-daemon runtime cgroup: not on a shared machine, and there is no such daemon.
# The kubelet runs in a cgroup of its own beside the runtime's (runtimes.sh), where the
# density suites measure it: the suite starts (and restarts) $WORK/k8s-bin/kubelet, which
# enters it and execs bin/kubelet. (The kubelet's --kubelet-cgroups would move it there
# itself, but not here: it moves nothing unless it can read PID 1's pid namespace.) The
# kubelet is told both cgroups, for its own figures (the Summary API's system containers).
# The suite looks for bin/kubelet beside its own binary (os.Args[0]): it runs as
# $WORK/k8s-bin/e2e_node.test, a link, beside the wrapper.
mkdir -p "$WORK/k8s-bin"
ln -s "$BIN/e2e_node.test" "$WORK/k8s-bin/e2e_node.test"
{
	echo '#!/bin/sh'
	echo '# bin/kubelet in the kubelet'"'"'s cgroup (run.sh)'
	for f in $(cg_procs kubelet); do echo "echo \$\$ >$f"; done
	echo "exec $BIN/kubelet \"\$@\""
} >"$WORK/k8s-bin/kubelet"
chmod 0755 "$WORK/k8s-bin/kubelet"
KUBELET_FLAGS="--system-cgroups= --runtime-cgroups=$CG/runtime --kubelet-cgroups=$CG/kubelet --node-ip=$NODE_IP"
cd "$WORK"
set +e
SUITE_FLAGS=(
	--container-runtime-endpoint="unix://$SOCK" --image-service-endpoint="unix://$SOCK"
	--kubelet-config-file="$WORK/kubelet-base.yaml" --kubelet-flags="$KUBELET_FLAGS"
	--prepull-images=false
	--report-dir="$RESULTS"
	# whose CPU and memory the density suites measure: the runtime's cgroup, found by its PID
	--container-runtime-process-name="$RUNTIME_PROC" --container-runtime-pid-file="$RUNTIME_PIDFILE"
)
if [ "$NODES" -gt 1 ]; then
	PATH=$WORK/path "$BIN/ginkgo" --procs="$NODES" \
		--focus="$FOCUS" --skip="$SKIP" \
		--junit-report="$RESULTS/junit.xml" --timeout=3h --no-color \
		"$WORK/k8s-bin/e2e_node.test" -- "${SUITE_FLAGS[@]}" "$@" 2>&1 | tee "$RESULTS/e2e_node.log"
else
	PATH=$WORK/path "$WORK/k8s-bin/e2e_node.test" "${SUITE_FLAGS[@]}" \
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
