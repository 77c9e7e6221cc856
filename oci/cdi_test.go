package oci

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCDIDevices(t *testing.T) {
	for _, tc := range []struct {
		name        string
		devices     []string
		annotations map[string]string
		want        []string
		invalid     bool
	}{
		{"none", nil, nil, nil, false},
		{"field", []string{"vendor.com/dev=a", "vendor.com/dev=b"}, nil, []string{"vendor.com/dev=a", "vendor.com/dev=b"}, false},
		{"annotations after the field, by key, each device once",
			[]string{"vendor.com/dev=a"},
			map[string]string{
				"cdi.k8s.io/z":   "vendor.com/dev=z",
				"cdi.k8s.io/a":   "vendor.com/dev=a,vendor.com/dev=c",
				"io.other/thing": "not a device",
			},
			[]string{"vendor.com/dev=a", "vendor.com/dev=c", "vendor.com/dev=z"}, false},
		{"unqualified field", []string{"gpu0"}, nil, nil, true},
		{"unqualified annotation", nil, map[string]string{"cdi.k8s.io/x": "vendor.com/dev=a,gpu0"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &runtimeapi.ContainerConfig{Annotations: tc.annotations}
			for _, d := range tc.devices {
				c.CDIDevices = append(c.CDIDevices, &runtimeapi.CDIDevice{Name: d})
			}
			got, err := CDIDevices(c)
			if tc.invalid {
				if !errors.Is(err, ErrInvalidSpec) {
					t.Fatalf("err = %v, want ErrInvalidSpec", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("devices (-want +got):\n%s", diff)
			}
		})
	}
}

// cdiSpec is a CDI spec file of vendor example.com, class test: device "null"
// is the host's /dev/null as /dev/cdi-null with an environment variable;
// "missing" names a host device that does not exist.
const cdiSpec = `{
  "cdiVersion": "0.6.0",
  "kind": "example.com/test",
  "devices": [
    {"name": "null", "containerEdits": {
      "env": ["CDI_TEST=null"],
      "deviceNodes": [{"path": "/dev/cdi-null", "hostPath": "/dev/null", "permissions": "rw"}]
    }},
    {"name": "missing", "containerEdits": {
      "deviceNodes": [{"path": "/dev/cdi-missing", "hostPath": "/dev/does-not-exist"}]
    }}
  ],
  "containerEdits": {"env": ["CDI_VENDOR=example"]}
}`

func TestCDIInject(t *testing.T) {
	low, high := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(low, "test.json"), cdiSpec)
	// A broken file in the other directory does not hide the good one.
	writeFile(t, filepath.Join(high, "broken.json"), "{not json")
	c := NewCDI([]string{low, high, filepath.Join(t.TempDir(), "absent")})

	s := mustSpec(t, baseInput(t), testHost())
	if err := c.Inject(s, []string{"example.com/test=null"}); err != nil {
		t.Fatal(err)
	}
	for _, kv := range []string{"CDI_TEST=null", "CDI_VENDOR=example"} {
		if !slices.Contains(s.Process.Env, kv) {
			t.Errorf("env %v lacks %s", s.Process.Env, kv)
		}
	}
	i := slices.IndexFunc(s.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == "/dev/cdi-null" })
	if i < 0 {
		t.Fatalf("devices %+v lack /dev/cdi-null", s.Linux.Devices)
	}
	if d := s.Linux.Devices[i]; d.Type != "c" || d.Major != 1 || d.Minor != 3 {
		t.Errorf("/dev/cdi-null is %+v, want the character device 1:3 of /dev/null", d)
	}
	rules := s.Linux.Resources.Devices
	if len(rules) < 2 || rules[0].Allow {
		t.Fatalf("device rules %+v: want the deny-all first", rules)
	}
	if r := rules[len(rules)-1]; !r.Allow || r.Type != "c" || *r.Major != 1 || *r.Minor != 3 || r.Access != "rw" {
		t.Errorf("last device rule %+v, want allow c 1:3 rw", r)
	}

	for _, tc := range []struct {
		name, device, inMessage string
	}{
		{"unknown device", "example.com/test=gpu7", "example.com/test=gpu7"},
		{"unknown vendor", "other.io/test=null", "other.io/test=null"},
		{"missing host device", "example.com/test=missing", "does-not-exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Inject(mustSpec(t, baseInput(t), testHost()), []string{tc.device})
			requireInvalidSpec(t, err, tc.inMessage)
		})
	}

	// A spec file written after the CDI was made is seen at the next injection.
	writeFile(t, filepath.Join(high, "late.json"), strings.ReplaceAll(cdiSpec, `"null"`, `"late"`))
	if err := c.Inject(mustSpec(t, baseInput(t), testHost()), []string{"example.com/test=late"}); err != nil {
		t.Fatalf("a spec written later: %v", err)
	}
	// No directory: every device is unknown.
	if err := NewCDI(nil).Inject(mustSpec(t, baseInput(t), testHost()), []string{"example.com/test=null"}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("no CDI directory: err = %v, want ErrInvalidSpec", err)
	}
}
