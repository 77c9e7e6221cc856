package test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestRuntimeInfo checks what a kubelet asks the runtime about itself, through
// crictl: info (RuntimeReady, the handlers with their features, the
// supplemental groups policy feature, the effective configuration),
// runtime-config (the cgroup driver), update-runtime-config (the pod CIDR is
// taken and shown); and that the daemon refuses an unknown cgroup_manager.
func TestRuntimeInfo(t *testing.T) {
	t.Parallel()
	runc, err := nodeRunc()
	if err != nil {
		testenv.Need(t, "TestRuntimeInfo needs runc in PATH: %v", err)
	}
	d := startDaemon(t, daemonOptions{})

	info := d.info(t)
	type condition struct {
		Type   string `json:"type"`
		Status bool   `json:"status"`
	}
	var conds struct {
		Conditions []condition `json:"conditions"`
	}
	mustDecode(t, "status", info["status"], &conds)
	if i := slices.IndexFunc(conds.Conditions, func(c condition) bool { return c.Type == "RuntimeReady" }); i < 0 || !conds.Conditions[i].Status {
		t.Errorf("crictl info conditions %+v, want RuntimeReady true", conds.Conditions)
	}

	type handler struct {
		Name     string          `json:"name"`
		Features map[string]bool `json:"features"`
	}
	var handlers []handler
	mustDecode(t, "runtimeHandlers", info["runtimeHandlers"], &handlers)
	// What runc says it supports is shown as it says it.
	out, err := exec.Command(runc, "features").Output()
	if err != nil {
		t.Fatalf("runc features: %v", err)
	}
	var runcFeatures struct {
		MountOptions []string `json:"mountOptions"`
	}
	mustDecode(t, "runc features", out, &runcFeatures)
	runcRRO := slices.Contains(runcFeatures.MountOptions, "rro")
	var reported map[string]map[string]bool
	mustDecode(t, "runtimeFeatures", info["runtimeFeatures"], &reported)
	var names []string
	for _, h := range handlers {
		names = append(names, h.Name)
		for f, on := range h.Features {
			switch f {
			case "recursive_read_only_mounts", "recursiveReadOnlyMounts":
				if on != runcRRO {
					t.Errorf("handler %q reports recursive read-only mounts %v, runc features lists rro: %v", h.Name, on, runcRRO)
				}
			case "user_namespaces", "userNamespaces":
				// Reported as the handler's runtime (runc) says.
				if want := reported["runc"]["userNamespaces"]; on != want {
					t.Errorf("handler %q reports user namespaces %v, runtimeFeatures.runc says %v", h.Name, on, want)
				}
			default:
				if on {
					t.Errorf("handler %q reports feature %s, which crijournal does not implement yet", h.Name, f)
				}
			}
		}
	}
	if want := []string{"runc", ""}; !slices.Equal(names, want) {
		t.Errorf("crictl info runtimeHandlers %q, want %q", names, want)
	}
	var features map[string]bool
	mustDecode(t, "features", info["features"], &features)
	if !features["supplemental_groups_policy"] && !features["supplementalGroupsPolicy"] {
		t.Errorf("crictl info features %v, want the supplemental groups policy", features)
	}
	if got, want := reported["runc"]["recursiveReadOnlyMounts"], runcRRO; got != want {
		t.Errorf("crictl info runtimeFeatures.runc.recursiveReadOnlyMounts = %v, runc features says %v", got, want)
	}

	var cfg map[string]any
	mustDecode(t, "config", info["config"], &cfg)
	if cfg["root"] != d.root || cfg["cgroup_manager"] != "cgroupfs" || cfg["socket"] != d.socket {
		t.Errorf("crictl info config: root %v, socket %v, cgroup_manager %v; want %s, %s, cgroupfs", cfg["root"], cfg["socket"], cfg["cgroup_manager"], d.root, d.socket)
	}

	if out := d.mustCrictl(t, "runtime-config"); !strings.Contains(out, "CGROUPFS") {
		t.Errorf("crictl runtime-config printed %q, want the cgroupfs driver", out)
	}

	d.mustCrictl(t, "update-runtime-config", "--pod-cidr", "10.244.7.0/24")
	var cidr string
	mustDecode(t, "podCIDR", d.info(t)["podCIDR"], &cidr)
	if cidr != "10.244.7.0/24" {
		t.Errorf("crictl info podCIDR %q after update-runtime-config, want 10.244.7.0/24", cidr)
	}

	// An unknown cgroup driver is refused with a clear message, naming the two there are.
	cmd := exec.Command(daemonBinary(t), "config")
	cmd.Env = daemonEnv([]string{"CRIJOURNAL_CONFIG=" + d.configPath, "CRIJOURNAL_CGROUP_MANAGER=cgroupv2"})
	msg, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), `cgroup_manager: must be "cgroupfs" or "systemd", got "cgroupv2"`) {
		t.Errorf("crijournal config with cgroup_manager=cgroupv2: %v, want a refusal naming the key\n%s", err, msg)
	}
}
