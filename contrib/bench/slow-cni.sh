#!/bin/bash
# slow-cni.sh: the kubelet-style timeout scenario. Starts a crijournal daemon whose
# bridge plugin sleeps CNI_DELAY seconds (default 3) before each ADD, runs
# `crijournal-bench --client-timeout` against it, then stops it by PID and removes what
# it made. Run as root from the repository, after `make build`. Arguments go to
# `crijournal-bench` (default: -n 8 -c 8 --client-timeout 2s).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-n 8 -c 8 --client-timeout 2s)

real=""
for d in /opt/cni/bin /usr/lib/cni; do [ -x "$d/bridge" ] && real="$d" && break; done
[ -n "$real" ] || { echo "$0: no CNI bridge plugin in /opt/cni/bin or /usr/lib/cni" >&2; exit 1; }
mkdir -p "$base/plugins"
cat > "$base/plugins/bridge" <<WRAP
#!/bin/bash
[ "\$CNI_COMMAND" = ADD ] && sleep ${CNI_DELAY:-3}
exec $real/bridge "\$@"
WRAP
chmod +x "$base/plugins/bridge"

start_daemon slow 3 --cni-plugin-dirs "$base/plugins,$real"
"$bench" --endpoint "unix://$base/slow/cri.sock" "${args[@]}"
