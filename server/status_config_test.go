package server

import (
	"context"
	"slices"
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
