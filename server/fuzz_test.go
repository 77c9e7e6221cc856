package server

import (
	"errors"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

// Fuzz targets over what a client controls: the request validation of RunPodSandbox and
// CreateContainer (configs as they come off the wire, protobuf), and the decoding of what
// a journal record holds. No input may panic; a refusal is InvalidArgument (a Go error
// that the gRPC edge would report as Unknown is a finding). `make test` runs each for a
// few seconds from the seed corpus in testdata/fuzz; see the README for a longer run.

// fuzzSandboxSeeds are PodSandboxConfigs the corpus starts from.
func fuzzSandboxSeeds() []*runtimeapi.PodSandboxConfig {
	return []*runtimeapi.PodSandboxConfig{
		kubeletPod("2026-12-01T07:00:00Z"),
		{Metadata: &runtimeapi.PodSandboxMetadata{Name: "../../etc", Namespace: "d", Uid: "u"}},
		{Metadata: &runtimeapi.PodSandboxMetadata{Name: "a_b", Namespace: "d", Uid: "u"}, Hostname: "x y"},
		{},
	}
}

func mustProto(f *testing.F, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// requireInvalidArgument fails unless err answers InvalidArgument at the edge (toStatus).
func requireInvalidArgument(t *testing.T, what string, err error) {
	t.Helper()
	if st, ok := status.FromError(toStatus(err)); !ok || st.Code() != codes.InvalidArgument {
		t.Fatalf("%s refused with %v (code %v), want InvalidArgument", what, err, status.Code(toStatus(err)))
	}
}

// safeNamePart reports whether a part of a name cannot escape a path or split a name.
func safeNamePart(s string) bool {
	return s != "" && !strings.ContainsAny(s, "/_\x00\n") && !strings.Contains(s, "..")
}

// FuzzRunPodSandboxConfig: sandboxName accepts a config or refuses it with
// InvalidArgument; an accepted one has a name whose parts are safe as path elements, and
// a deterministic fingerprint that does not change the request.
func FuzzRunPodSandboxConfig(f *testing.F) {
	for _, c := range fuzzSandboxSeeds() {
		f.Add(mustProto(f, c), "runc")
	}
	f.Add([]byte{0x0a, 0x00}, "")
	f.Fuzz(func(t *testing.T, b []byte, handler string) {
		cfg := &runtimeapi.PodSandboxConfig{}
		if proto.Unmarshal(b, cfg) != nil {
			return // refused by the gRPC layer before any handler sees it
		}
		before := proto.Clone(cfg)
		name, err := sandboxName(cfg)
		if err != nil {
			requireInvalidArgument(t, "sandboxName", err)
			return
		}
		md := cfg.GetMetadata()
		for _, part := range []string{md.GetName(), md.GetNamespace(), md.GetUid()} {
			if !safeNamePart(part) {
				t.Fatalf("sandboxName accepted the unsafe part %q (name %q)", part, name)
			}
		}
		if fp := fingerprint(cfg, handler); fp != fingerprint(cfg, handler) || !strings.HasPrefix(fp, fingerprintVersion) {
			t.Fatalf("fingerprint %q is not deterministic or not versioned", fp)
		}
		if !proto.Equal(before, cfg) {
			t.Fatal("validation or fingerprint changed the request")
		}
	})
}

// FuzzCreateContainerConfig: containerName, logPath and the OCI spec either accept a
// container config or refuse it with InvalidArgument (the spec's refusals wrap
// oci.ErrInvalidSpec, which CreateContainer reports as InvalidArgument); an accepted log
// path stays inside the sandbox's log directory.
func FuzzCreateContainerConfig(f *testing.F) {
	sandbox := mustProto(f, &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "d", Uid: "u"},
		LogDirectory: "/var/log/pods/d_p_u",
	})
	for _, c := range []*runtimeapi.ContainerConfig{
		{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, LogPath: "c/0.log",
			Command: []string{"sh"}, Envs: []*runtimeapi.KeyValue{{Key: "A", Value: []byte("b")}},
			Mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/tmp"}},
			Linux:  &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 1 << 20, CpuShares: 2}}},
		{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, LogPath: "../../etc/passwd"},
		{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
			Devices: []*runtimeapi.Device{{ContainerPath: "/dev/x", HostPath: "/nonexistent", Permissions: "rw"}}},
		{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				RunAsUsername: "nobody", Capabilities: &runtimeapi.Capability{AddCapabilities: []string{"ALL", "CAP_BOGUS"}}}}},
		{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"},
			Mounts: []*runtimeapi.Mount{{ContainerPath: "/vol", Readonly: true, Image: &runtimeapi.ImageSpec{Image: "busybox"}, ImageSubPath: "etc/../x"}}},
		{},
	} {
		f.Add(sandbox, mustProto(f, c))
	}
	rootfs := f.TempDir()
	f.Fuzz(func(t *testing.T, sb, c []byte) {
		sandbox, cfg := &runtimeapi.PodSandboxConfig{}, &runtimeapi.ContainerConfig{}
		if proto.Unmarshal(sb, sandbox) != nil || proto.Unmarshal(c, cfg) != nil {
			return
		}
		if _, err := sandboxName(sandbox); err != nil {
			return // CreateContainer needs a created sandbox: its config passed this
		}
		if _, err := containerName(cfg, sandbox); err != nil {
			requireInvalidArgument(t, "containerName", err)
			return
		}
		if !safeNamePart(cfg.GetMetadata().GetName()) {
			t.Fatalf("containerName accepted the unsafe name %q", cfg.GetMetadata().GetName())
		}
		p, err := logPath(sandbox, cfg)
		if err != nil {
			requireInvalidArgument(t, "logPath", err)
			return
		}
		if dir := sandbox.GetLogDirectory(); p != "" && !strings.HasPrefix(p, filepath.Clean(dir)+"/") {
			t.Fatalf("log path %q escapes the log directory %q", p, dir)
		}
		_, err = oci.Spec(t.Context(), oci.SpecInput{ID: strings.Repeat("a", 64), Container: cfg, Sandbox: sandbox, Rootfs: rootfs,
			Hostname: sandboxHostname(sandbox)})
		// ErrNoDefaultAppArmor is the node's refusal (an AppArmor node that cannot
		// load the default profile), not the config's.
		if err != nil && !errors.Is(err, oci.ErrInvalidSpec) && !errors.Is(err, oci.ErrNoDefaultAppArmor) {
			t.Fatalf("oci.Spec refused the config with %v, which is not ErrInvalidSpec (it would reach the client as Unknown)", err)
		}
		vols, err := oci.ImageVolumes(cfg)
		if err != nil {
			requireInvalidArgument(t, "oci.ImageVolumes", err)
			return
		}
		for _, v := range vols {
			if path.IsAbs(v.SubPath) || v.SubPath != "" && path.Clean(v.SubPath) != v.SubPath ||
				slices.Contains(strings.Split(v.SubPath, "/"), "..") || !path.IsAbs(v.Destination) {
				t.Fatalf("oci.ImageVolumes accepted %+v: the sub path may leave the image", v)
			}
		}
	})
}

// FuzzDecodeRecordObject: the object a sandbox or container record holds (JSON carrying
// the CRI config as protobuf) decodes or fails with an error, never a panic.
func FuzzDecodeRecordObject(f *testing.F) {
	f.Add([]byte(`{"config":"","created_at":"2026-12-01T07:00:00Z"}`))
	f.Add([]byte(`{"config":"CgA=","namespaces":{"net":"/run/x"},"ips":["10.0.0.2"]}`))
	f.Add([]byte(`{"config":"////","sandbox_id":"x"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, object []byte) {
		for _, kind := range []journal.Kind{journal.KindSandbox, journal.KindContainer} {
			rec := journal.Record{ID: strings.Repeat("b", 64), Kind: kind, Name: "n", State: journal.StateCreated, Object: object}
			if kind == journal.KindSandbox {
				if sb, err := decodeSandbox(rec); err == nil {
					_ = sb.state()
				}
				continue
			}
			if c, err := decodeContainer(rec); err == nil {
				_ = c.state()
			}
		}
	})
}
