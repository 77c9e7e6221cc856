#!/usr/bin/env bash
# contrib/bench/containerd-config.sh: containerd 2.x's configuration (version 3) as the
# project runs it, for the bench (containerd.sh) and the kubelet's density suites
# (test/node-e2e/runtimes.sh), and the sections containerd 1.6's version 2 shares with it.
# Sourced; defines two functions.
#
# containerd_v3_config <file> <dir> <run root> <socket> <CNI plugins> <runc> <pause image>
#   [<certs.d> [<handler>...]]: containerd's root and CNI configuration under <dir>, its
# state, runc's root, debug and NRI sockets under <run root>; the runc handler, and each
# extra <handler> with the same options; registry hosts from <certs.d> when given. The CRI
# plugin is split into its images, runtime and server plugins. NRI is on by default in 2.x,
# as in crijournal: it stays on, on a socket and plugin directories of its own.
containerd_v3_config() {
	local file="$1" ctd="$2" ctdrun="$3" sock="$4" cnibin="$5" runc="$6" pause="$7" certs="${8:-}"
	shift 7
	[ $# -gt 0 ] && shift
	local handler registry="" handlers=""
	[ -n "$certs" ] && registry="
  [plugins.\"io.containerd.cri.v1.images\".registry]
    config_path = \"$certs\""
	for handler in runc "$@"; do
		handlers+="
    [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.$handler]
      runtime_type = \"io.containerd.runc.v2\"
      snapshotter = \"overlayfs\"
      [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.$handler.options]
        BinaryName = \"$runc\"
        Root = \"$ctdrun/runc\"
        SystemdCgroup = false"
	done
	{
		cat <<CONFIG
version = 3
root = "$ctd/root"
state = "$ctdrun/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]
CONFIG
		containerd_listen_sections "$ctd" "$ctdrun" "$sock"
		cat <<CONFIG
[plugins."io.containerd.nri.v1.nri"]
  socket_path = "$ctdrun/nri.sock"
  plugin_path = "$ctd/nri/plugins"
  plugin_config_path = "$ctd/nri/conf.d"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$pause"$registry
[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  # no CAP_SYS_RESOURCE here: the sandbox's oom_score_adj -998 would fail in runc
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"$handlers
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$cnibin"]
    conf_dir = "$ctd/net.d"
    max_conf_num = 1
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
CONFIG
	} >"$file"
}

# containerd_listen_sections CTD CTDRUN SOCK: the sections both configuration versions (2,
# for containerd 1.6, and 3) write alike: the sockets, debug and metrics, the opt directory.
containerd_listen_sections() {
	local ctd="$1" ctdrun="$2" sock="$3"
	cat <<SECTIONS
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = "$ctdrun/debug.sock"
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$ctd/opt"
SECTIONS
}
