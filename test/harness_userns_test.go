package test

import (
	"maps"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Helpers of pods and containers with their own user namespace.

// usernsPod writes a pod configuration with the given user namespace options
// (namespace_options.userns_options, as the kubelet sends for hostUsers: false).
func usernsPod(t *testing.T, name string, userns map[string]any) string {
	t.Helper()
	uid := randomHex(t, 16)
	cfg := map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "e2e", "uid": uid, "attempt": 0},
		"hostname": "e2e",
		"labels":   map[string]string{"e2e": "crijournal"},
		"linux": map[string]any{"security_context": map[string]any{
			"namespace_options": map[string]any{"userns_options": userns},
		}},
	}
	return writePodJSON(t, "pod-"+sanitize(name)+"-"+uid[:8], cfg)
}

// idMapping is one IDMapping of userns_options, as crictl reads it.
func idMapping(container, host, length int) []map[string]any {
	return []map[string]any{{"container_id": container, "host_id": host, "length": length}}
}

// usernsHostID is the first host ID the e2e pods' user namespaces map to.
const usernsHostID = 200000

// usernsContainerPod writes a pod configuration like containerPod's, with its
// own user namespace (0 -> usernsHostID, 65536 IDs) and the given pid mode.
func (d *daemon) usernsContainerPod(t *testing.T, name string, pid runtimeapi.NamespaceMode) string {
	t.Helper()
	return d.editedPod(t, name, func(cfg map[string]any) { maps.Copy(namespaceOptions(cfg), usernsOptions(pid)) })
}

func usernsOptions(pid runtimeapi.NamespaceMode) map[string]any {
	return map[string]any{"pid": int(pid), "userns_options": map[string]any{"mode": int(runtimeapi.NamespaceMode_POD),
		"uids": idMapping(0, usernsHostID, 65536), "gids": idMapping(0, usernsHostID, 65536)}}
}

// withUserns gives a container the namespace options of a usernsContainerPod, as
// the kubelet copies the pod's into each container's.
func withUserns(pid runtimeapi.NamespaceMode) ctrOption {
	return func(cfg map[string]any) {
		cfg["linux"] = map[string]any{"security_context": map[string]any{"namespace_options": usernsOptions(pid)}}
	}
}
