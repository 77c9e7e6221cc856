package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/oci"
)

// fakeRuntimes hands out runtimes by handler.
type fakeRuntimes map[string]*oci.Runtime

func (f fakeRuntimes) Runtime(handler string) (*oci.Runtime, error) {
	if r, ok := f[handler]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("no runtime handler %q", handler)
}

// featuresRuntime is a runtime whose binary answers `features` with doc.
func featuresRuntime(t *testing.T, handler, doc string) *oci.Runtime {
	t.Helper()
	dir, err := os.MkdirTemp("", "cjrt") // short: conmon's socket paths live under it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "runtime")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\ncat <<'EOF'\n"+doc+"\nEOF\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := oci.New(oci.Config{Handler: handler, Path: bin, ConmonPath: "/bin/true",
		Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestStatusReportsRecursiveReadOnly: a handler reports recursive read-only mounts when
// its runtime's features list the "rro" mount option, and only then.
func TestStatusReportsRecursiveReadOnly(t *testing.T) {
	s := testServer(t)
	s.networks = networkSource{}
	s.cfg = config.Default()
	s.cfg.Runtimes = map[string]config.Runtime{"new": {}, "old": {}, "broken": {}}
	s.cfg.DefaultRuntime = "new"
	s.runtimes = fakeRuntimes{
		"new":    featuresRuntime(t, "new", `{"ociVersionMin":"1.0.0","ociVersionMax":"1.2.0","mountOptions":["bind","ro","rro"]}`),
		"old":    featuresRuntime(t, "old", `{"ociVersionMin":"1.0.0","ociVersionMax":"1.0.2","mountOptions":["bind","ro"]}`),
		"broken": featuresRuntime(t, "broken", `not json`),
	}
	resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, h := range resp.GetRuntimeHandlers() {
		got[h.GetName()] = h.GetFeatures().GetRecursiveReadOnlyMounts()
	}
	want := map[string]bool{"new": true, "old": false, "broken": false, "": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("recursive read-only mounts by handler (-want +got):\n%s", diff)
	}
	if !s.supportsRecursiveReadOnly(context.Background(), "new") || s.supportsRecursiveReadOnly(context.Background(), "old") ||
		s.supportsRecursiveReadOnly(context.Background(), "unknown") {
		t.Error("supportsRecursiveReadOnly does not follow the runtimes' features")
	}
}

// TestStatusMountsReportImageRef: ContainerStatus's mounts carry each image volume's image
// ID as its image_ref, and leave the request's config as it was.
func TestStatusMountsReportImageRef(t *testing.T) {
	bind := &runtimeapi.Mount{ContainerPath: "/data", HostPath: "/tmp"}
	vol := &runtimeapi.Mount{ContainerPath: "/vol/", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "sha256:1234", UserSpecifiedImage: "busybox"}}
	c := container{
		config: &runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{bind, vol}},
		obj:    containerObject{ImageVolumes: map[string]string{"/vol": "1234abcd"}},
	}
	want := []*runtimeapi.Mount{bind, {ContainerPath: "/vol/", Readonly: true,
		Image: &runtimeapi.ImageSpec{Image: "sha256:1234", UserSpecifiedImage: "busybox", ImageRef: "1234abcd"}}}
	if diff := cmp.Diff(want, c.mounts(), protocmp.Transform()); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	if vol.Image.ImageRef != "" {
		t.Error("mounts changed the container's config")
	}
	// Without image volumes the config's mounts are returned as they are.
	c.obj.ImageVolumes = nil
	if got := c.mounts(); len(got) != 2 || got[1] != vol {
		t.Errorf("mounts without image volumes: %v", got)
	}
}

// TestStatusImageNamesTheUsersImage: a container's status names its image as the user
// wrote it when the kubelet passed that along (the kubelet compares it with the pod
// spec's image to tell an image update took effect), and as the creation named it
// otherwise; the container's config is left as it was.
func TestStatusImageNamesTheUsersImage(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *runtimeapi.ImageSpec
		want *runtimeapi.ImageSpec
	}{
		{"kubelet: image ID and the user's image",
			&runtimeapi.ImageSpec{Image: "3d4170e87f55", UserSpecifiedImage: "busybox:1.37", Annotations: map[string]string{"a": "b"}},
			&runtimeapi.ImageSpec{Image: "busybox:1.37", UserSpecifiedImage: "busybox:1.37", Annotations: map[string]string{"a": "b"}}},
		{"crictl: the image only",
			&runtimeapi.ImageSpec{Image: "busybox:1.37"},
			&runtimeapi.ImageSpec{Image: "busybox:1.37"}},
		{"no image", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.spec)
			c := container{config: &runtimeapi.ContainerConfig{Image: tc.spec}}
			if diff := cmp.Diff(tc.want, c.statusImage(), protocmp.Transform()); diff != "" {
				t.Errorf("status image (-want +got):\n%s", diff)
			}
			if !proto.Equal(before, tc.spec) {
				t.Error("statusImage changed the container's config")
			}
		})
	}
}
