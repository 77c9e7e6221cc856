package server

import (
	"fmt"
	"os"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/netns"
)

// What a pod's containers get from the sandbox rather than from their image, as CRI-O
// gives it: /etc/resolv.conf (the pod's DNS configuration, or a copy of the host's; also for
// pods on the host's network, whose containers would otherwise see their image's file),
// /etc/hostname, /dev/shm (the pod's own tmpfs, or the host's for ipc NODE) and, for pods
// on the host's network only, the host's /etc/hosts, which oci mounts read-only as it is
// the node's (the kubelet mounts its own /etc/hosts into the containers of other pods).
// The files live in <run_root>/sandboxes/<id>/: they outlive a restart of the daemon, not
// a reboot (see sandbox.lost).

// hostEtcHosts is the /etc/hosts of containers of pods on the host's network.
const hostEtcHosts = "/etc/hosts"

// podFilesDir is the directory of the sandboxes' files (see netns.PodFilesDir).
func (s *Server) podFilesDir() string { return s.cfg.Layout().PodFilesDir() }

// podDNS returns the pod's DNS configuration, checked (InvalidArgument when it cannot be
// written as a resolv.conf).
func podDNS(cfg *runtimeapi.PodSandboxConfig) (netns.DNS, error) {
	d := cfg.GetDnsConfig()
	dns := netns.DNS{Servers: d.GetServers(), Searches: d.GetSearches(), Options: d.GetOptions()}
	return dns, dns.Validate()
}

// podPortMappings returns the pod's host ports for CNI, checked. Mappings without a host
// port (the kubelet passes every declared container port) are left out, as containerd and
// CRI-O leave them out.
func podPortMappings(cfg *runtimeapi.PodSandboxConfig) ([]netns.PortMapping, error) {
	var out []netns.PortMapping
	for _, pm := range cfg.GetPortMappings() {
		if pm.GetHostPort() == 0 {
			continue
		}
		out = append(out, netns.PortMapping{
			HostPort: pm.GetHostPort(), ContainerPort: pm.GetContainerPort(),
			Protocol: strings.ToLower(pm.GetProtocol().String()), HostIP: pm.GetHostIp(),
		})
	}
	return out, netns.ValidatePortMappings(out)
}

// podHostnameFile returns what the pod's /etc/hostname says: the hostname of its UTS
// namespace, or for a pod on the host's network that names none, the host's (as CRI-O).
func podHostnameFile(cfg *runtimeapi.PodSandboxConfig, hostNetwork bool) (string, error) {
	if hostNetwork && cfg.GetHostname() == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("the host's hostname: %w", err)
		}
		return h, nil
	}
	return sandboxHostname(cfg), nil
}

// podFilesLost says which of a sandbox's files are gone ("" when none): a reboot empties
// run_root, and a container created from a lost file would fail.
func (sb sandbox) podFilesLost() string {
	for _, f := range []string{sb.obj.ResolvConf, sb.obj.HostnameFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return "pod file " + f
		}
	}
	if shm := sb.obj.Shm; shm != "" && shm != netns.HostShm && !netns.IsMountPoint(shm) {
		return "pod shm " + shm
	}
	return ""
}

// sandboxHosts is the /etc/hosts a container of the sandbox gets: the host's for a pod on
// the host's network (read-only; a CRI mount at /etc/hosts replaces it), none otherwise.
func sandboxHosts(sb sandbox) string {
	if sb.obj.HostNetwork {
		return hostEtcHosts
	}
	return ""
}
