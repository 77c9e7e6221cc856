package oci

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci/spec"
)

// Copies of oci/spec's test helpers, for the tests of what stays here.

// testHost is a daemon without CAP_SYS_RESOURCE (as in a container that lacks it),
// oom_score_adj 0, cgroup v1 without swap or hugetlb, that looks users up in the root
// filesystem as Spec does.
func testHost() spec.Host {
	return spec.Host{Bounding: slices.DeleteFunc(slices.Clone(spec.CapNames), func(c string) bool { return c == "CAP_SYS_RESOURCE" }), User: resolveUser}
}

func baseInput(t *testing.T) SpecInput {
	return SpecInput{
		ID:        "c1",
		Container: &runtimeapi.ContainerConfig{Command: []string{"sh"}},
		Sandbox:   &runtimeapi.PodSandboxConfig{Hostname: "pod"},
		Rootfs:    specRootfs(t),
	}
}

func sc(in *SpecInput) *runtimeapi.LinuxContainerSecurityContext {
	if in.Container.Linux == nil {
		in.Container.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if in.Container.Linux.SecurityContext == nil {
		in.Container.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	return in.Container.Linux.SecurityContext
}

func mustSpec(t *testing.T, in SpecInput, h spec.Host) *specs.Spec {
	t.Helper()
	s, err := spec.Build(t.Context(), in, h)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return s
}

// specOrInvalid builds in's spec on h. When invalid, it requires the refusal
// (ErrInvalidSpec) and returns nil; otherwise it requires the spec.
func specOrInvalid(t *testing.T, in SpecInput, h spec.Host, invalid bool) *specs.Spec {
	t.Helper()
	if !invalid {
		return mustSpec(t, in, h)
	}
	if _, err := spec.Build(t.Context(), in, h); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("err = %v, want ErrInvalidSpec", err)
	}
	return nil
}

// fakeAppArmor describes an AppArmor node for tests.
type fakeAppArmor struct {
	enabled bool
	have    []string // the profiles loaded at the start
	listErr error    // reading the loaded profiles fails with it
	loadErr error    // loading a profile fails with it
	noLoad  bool     // the node cannot load profiles (no load func)
}

// start returns the node as the spec sees it, and a func that returns the texts it
// was asked to load so far. A profile loaded without error is loaded from then on.
func (f fakeAppArmor) start() (spec.AppArmorHost, func() []string) {
	var mu sync.Mutex
	have := map[string]bool{}
	for _, n := range f.have {
		have[n] = true
	}
	var loads []string
	aa := spec.AppArmorHost{Enabled: f.enabled, Loaded: func(name string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return have[name], f.listErr
	}}
	if !f.noLoad {
		aa.Load = func(_ context.Context, name, text string) error {
			mu.Lock()
			defer mu.Unlock()
			loads = append(loads, text)
			if f.loadErr != nil {
				return f.loadErr
			}
			have[name] = true
			return nil
		}
	}
	return aa, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(loads)
	}
}

func resourcesOf(in *SpecInput) *runtimeapi.LinuxContainerResources {
	if in.Container.Linux == nil {
		in.Container.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if in.Container.Linux.Resources == nil {
		in.Container.Linux.Resources = &runtimeapi.LinuxContainerResources{}
	}
	return in.Container.Linux.Resources
}
