#!/bin/bash
# smoke.sh BIN: run INSIDE a systemd booted by up.sh (nse smoke.sh BIN): a crijournal with
# cgroup_manager = "systemd" on the default paths (but the repository's CNI network and
# signature policy, which the node may lack), a pod in a slice of its own that systemd does not
# have (so the daemon makes it, as a step), a busybox container; prints the units and cgroups
# at each stage and fails if any is left once the pod is removed. Images come from a
# loopback registry (test/kit/registry.sh, or $REGISTRY_SH), filled with the kit's images, which
# must be made on the host before the boot (test/kit/images.sh; the booted systemd has no network).
set -euo pipefail
BIN=$(readlink -f "${1:?usage: smoke.sh BIN}")
REGISTRY_SH=${REGISTRY_SH:-$(cd "$(dirname "$0")/../kit" && pwd)/registry.sh}
[ -d /run/systemd/system ] || { echo "smoke.sh: not inside a systemd (run it through nse)" >&2; exit 1; }
mountpoint -q /var/lib || mount -t tmpfs tmpfs /var/lib # storage's overlay cannot sit on the root overlay
"$REGISTRY_SH" start >/tmp/registry.log 2>&1
W=/tmp/smoke; mkdir -p $W/cni
TOP=$(cd "$(dirname "$0")/../.." && pwd)
cp "$TOP/contrib/cni/10-crijournal-bridge.conflist" $W/cni/ # the node's own may be missing
cat >$W/crijournal.toml <<T
cgroup_manager = "systemd"
log_level = "debug"
signature_policy = "$TOP/contrib/containers/policy.json"
cni_conf_dir = "$W/cni"
[[registries]]
prefix = "registry.k8s.io"
location = "127.0.0.1:5000"
insecure = true
T
CRIJOURNAL_CONFIG=$W/crijournal.toml setsid "$BIN" serve >$W/daemon.log 2>&1 </dev/null &
DPID=$!
trap 'kill $DPID 2>/dev/null; wait $DPID 2>/dev/null; "$REGISTRY_SH" stop' EXIT
printf 'runtime-endpoint: unix:///run/crijournal/crijournal.sock\nimage-endpoint: unix:///run/crijournal/crijournal.sock\n' >/etc/crictl.yaml
for _ in $(seq 100); do crictl version >/dev/null 2>&1 && break; sleep 0.2; done
crictl runtime-config | grep -i cgroup
units() { echo "--- units ($1):"; systemctl list-units --all --no-legend --plain 'crijournal*' 'cjsmoke*' | awk '{print "  " $1, $3, $4}'; }
cat >$W/pod.json <<J
{"metadata": {"name": "smoke", "namespace": "default", "uid": "smoke-uid", "attempt": 0},
 "linux": {"cgroup_parent": "cjsmoke-pod1.slice", "security_context": {"namespace_options": {"pid": 0}}},
 "log_directory": "$W/logs"}
J
cat >$W/ctr.json <<J
{"metadata": {"name": "sleeper"}, "image": {"image": "registry.k8s.io/e2e-test-images/busybox:1.29-2"},
 "command": ["sleep", "3600"], "log_path": "sleeper.log", "linux": {"resources": {"memory_limit_in_bytes": 67108864}}}
J
crictl pull registry.k8s.io/e2e-test-images/busybox:1.29-2 >/dev/null
units before
POD=$(crictl runp $W/pod.json)
CTR=$(crictl create $POD $W/ctr.json $W/pod.json)
crictl start $CTR >/dev/null
units running
echo "--- memory limit: $(cat /sys/fs/cgroup/memory/cjsmoke.slice/cjsmoke-pod1.slice/crijournal-$CTR.scope/memory.limit_in_bytes)"
crictl stats -o json $CTR | grep -E '"(usageBytes|workingSetBytes|usageCoreNanoSeconds)"' -A1 | grep value | head -3
crictl stopp $POD >/dev/null; crictl rmp $POD >/dev/null
units removed
left=$(systemctl list-units --all --no-legend --plain 'crijournal-*' 'cjsmoke-*' | awk '{print $1}')
cgleft=$(find /sys/fs/cgroup/*/cjsmoke.slice -mindepth 1 -type d 2>/dev/null || true)
if [ -n "$left$cgleft" ]; then echo "smoke.sh: LEFT: $left $cgleft"; exit 1; fi
echo "smoke.sh: nothing left"
