package server

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/config"
)

func TestStatusListsHandlers(t *testing.T) {
	s := testServer(t)
	s.networks = networkSource{}
	s.cfg = config.Default()
	s.cfg.Runtimes = map[string]config.Runtime{"runc": {}, "kata": {}}
	resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range resp.GetRuntimeHandlers() {
		names = append(names, h.GetName())
		// No runtime answers here: a handler that cannot say supports nothing.
		if h.GetFeatures() == nil || h.GetFeatures().GetRecursiveReadOnlyMounts() || h.GetFeatures().GetUserNamespaces() {
			t.Errorf("handler %q features %v, want both false (its runtime cannot be asked)", h.GetName(), h.GetFeatures())
		}
	}
	if want := []string{"kata", "runc", ""}; !slices.Equal(names, want) {
		t.Errorf("runtime handlers %q, want %q (the default one again without a name)", names, want)
	}
	if !resp.GetFeatures().GetSupplementalGroupsPolicy() {
		t.Error("features.supplemental_groups_policy is false")
	}
	if !resp.GetFeatures().GetMountOptions() {
		t.Error("features.mount_options is false: the kubelet then drops bindMountOptions")
	}
	if resp.GetInfo()["config"] == "" || resp.GetInfo()["runtimeFeatures"] == "" {
		t.Errorf("verbose info %v, want config and runtimeFeatures", resp.GetInfo())
	}
}

func TestUpdateRuntimeConfigKeepsPodCIDR(t *testing.T) {
	s := testServer(t)
	s.networks = networkSource{}
	_, err := s.UpdateRuntimeConfig(context.Background(), &runtimeapi.UpdateRuntimeConfigRequest{
		RuntimeConfig: &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.244.1.0/24"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetInfo()["podCIDR"]; got != `"10.244.1.0/24"` {
		t.Errorf("verbose podCIDR %s, want the updated one", got)
	}
	rc, err := s.RuntimeConfig(context.Background(), &runtimeapi.RuntimeConfigRequest{})
	if err != nil || rc.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_CGROUPFS {
		t.Errorf("RuntimeConfig = %v, %v, want cgroupfs", rc, err)
	}
}

func TestSignalNames(t *testing.T) {
	for _, tt := range []struct {
		sig syscall.Signal
		cri runtimeapi.Signal
	}{
		{syscall.SIGTERM, runtimeapi.Signal_SIGNAL_SIGTERM},
		{syscall.SIGKILL, runtimeapi.Signal_SIGNAL_SIGKILL},
		{syscall.SIGUSR1, runtimeapi.Signal_SIGNAL_SIGUSR1},
		{34, runtimeapi.Signal_SIGNAL_SIGRTMIN},
		{35, runtimeapi.Signal_SIGNAL_SIGRTMINPLUS1},
		{49, runtimeapi.Signal_SIGNAL_SIGRTMINPLUS15},
		{50, runtimeapi.Signal_SIGNAL_SIGRTMAXMINUS14},
		{63, runtimeapi.Signal_SIGNAL_SIGRTMAXMINUS1},
		{64, runtimeapi.Signal_SIGNAL_SIGRTMAX},
	} {
		if got := criSignal(tt.sig); got != tt.cri {
			t.Errorf("criSignal(%d) = %v, want %v", tt.sig, got, tt.cri)
		}
		c := container{config: &runtimeapi.ContainerConfig{StopSignal: tt.cri}}
		if got := c.stopSignal(); got != tt.sig {
			t.Errorf("stop signal of a config asking for %v = %d, want %d", tt.cri, got, tt.sig)
		}
	}
	for _, tc := range []struct {
		name   string
		config runtimeapi.Signal
		image  string
		want   syscall.Signal
	}{
		{"image's without one in the config", runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "SIGQUIT", syscall.SIGQUIT},
		{"config's over the image's", runtimeapi.Signal_SIGNAL_SIGUSR2, "SIGQUIT", syscall.SIGUSR2},
		{"config's without one in the image", runtimeapi.Signal_SIGNAL_SIGINT, "", syscall.SIGINT},
		{"SIGTERM without either", runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "", syscall.SIGTERM},
		{"SIGTERM for an image's unknown one", runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "SIGNOPE", syscall.SIGTERM},
	} {
		c := container{config: &runtimeapi.ContainerConfig{StopSignal: tc.config}, obj: containerObject{StopSig: tc.image}}
		if got := c.stopSignal(); got != tc.want {
			t.Errorf("stop signal, %s = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestContainerUserListsPrimaryGroup(t *testing.T) {
	c := container{obj: containerObject{User: &specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{1234, 50000, 1000}}}}
	u := c.user().GetLinux()
	if u.GetUid() != 1000 || u.GetGid() != 1000 || !slices.Equal(u.GetSupplementalGroups(), []int64{1000, 1234, 50000}) {
		t.Errorf("user %v, want uid 1000 gid 1000 groups [1000 1234 50000]", u)
	}
	if (container{}).user() != nil {
		t.Error("a container without a recorded user reports one")
	}
}

// TestVerboseStatusReportsRuntimeVersions: crictl info shows, under runtimeVersions, each
// handler's runtime version and whether it has the fixes of runc's known breakouts, with
// the CVEs and the fix when it lacks them.
func TestVerboseStatusReportsRuntimeVersions(t *testing.T) {
	s := testServer(t)
	s.networks = networkSource{}
	s.cfg = config.Default()
	s.cfg.Runtimes = map[string]config.Runtime{"debian": {}, "project": {}, "crun": {}, "missing": {}}
	s.cfg.DefaultRuntime = "project"
	s.runtimes = fakeRuntimes{
		"debian":  featuresRuntime(t, "debian", "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1"),
		"project": featuresRuntime(t, "project", "runc version 1.3.7\ncommit: v1.3.7"),
		"crun":    featuresRuntime(t, "crun", "crun version 1.8.1"),
	}
	resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]struct {
		Version string   `json:"version"`
		Verdict string   `json:"verdict"`
		CVEs    []string `json:"cves"`
		Fix     string   `json:"fix"`
		Error   string   `json:"error"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()[StatusInfoRuntimeVersions]), &got); err != nil {
		t.Fatalf("info %s: %v", StatusInfoRuntimeVersions, err)
	}
	for handler, want := range map[string]struct{ version, verdict string }{
		"debian":  {"1.1.5+ds1", "vulnerable"},
		"project": {"1.3.7", "fixed"},
		"crun":    {"1.8.1", "not-runc"},
		"missing": {"", "unknown"},
	} {
		v := got[handler]
		if v.Version != want.version || v.Verdict != want.verdict {
			t.Errorf("handler %s: %+v, want version %q, verdict %s", handler, v, want.version, want.verdict)
		}
		if lacks := want.verdict == "vulnerable"; lacks != (slices.Contains(v.CVEs, "CVE-2025-52881") && strings.Contains(v.Fix, "1.2.8")) {
			t.Errorf("handler %s: CVEs %q, fix %q; want them named exactly when vulnerable", handler, v.CVEs, v.Fix)
		}
	}
	if got["missing"].Error == "" {
		t.Error("a handler without a runtime reports no error")
	}
}
