//lint:file-ignore SA1019 the tests cover the deprecated profile strings older kubelets send.

package oci

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/oci/spec"
)

// TestLoadAppArmorProfileWithoutKernel: on a machine whose kernel has no AppArmor,
// apparmor_parser (where installed) fails to load the profile, and the error names
// the profile and says what the parser said; a context that has ended stops it.
func TestLoadAppArmorProfileWithoutKernel(t *testing.T) {
	if exists("/sys/kernel/security/apparmor") {
		t.Skip("this kernel has AppArmor: the test would load a profile into it")
	}
	if _, err := appArmorParser(); err != nil {
		testenv.Need(t, "%v: install Debian's apparmor package (make deps does)", err)
	}
	text := spec.AppArmorProfile(spec.AppArmorProfileInput{Name: "crijournal-test"})
	err := loadAppArmorProfile(t.Context(), "crijournal-test", text)
	if err == nil || !strings.Contains(err.Error(), `load AppArmor profile "crijournal-test"`) || !strings.Contains(err.Error(), "apparmor_parser -Kr") {
		t.Fatalf("err = %v, want a failed load naming the profile and the parser", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := loadAppArmorProfile(ctx, "crijournal-test", text); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestLoadedAppArmor reads a profiles list in the kernel's format.
func TestLoadedAppArmor(t *testing.T) {
	list := filepath.Join(t.TempDir(), "profiles")
	writeFile(t, list, "crijournal-default (enforce)\n/usr/bin/man (complain)\nmy profile (enforce)\n")
	for name, want := range map[string]bool{
		"crijournal-default": true, "/usr/bin/man": true, "my profile": true, "my": false, "crijournal": false,
	} {
		if got, err := loadedAppArmor(list, name); err != nil || got != want {
			t.Errorf("loaded(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if got, err := loadedAppArmor(filepath.Join(t.TempDir(), "none"), "x"); got || err != nil {
		t.Errorf("missing list: %v, %v", got, err)
	}
}

// TestAppArmorProfileParses: apparmor_parser, where installed, compiles the profile
// without loading it (-Q), with and without the node's policy files.
func TestAppArmorProfileParses(t *testing.T) {
	parser, err := appArmorParser()
	if err != nil {
		testenv.Need(t, "%v: install Debian's apparmor package (make deps does)", err)
	}
	for _, in := range []spec.AppArmorProfileInput{
		{Name: DefaultAppArmorProfile, Daemon: "crijournald"},
		readAppArmorProfileInput(DefaultAppArmorProfile),
	} {
		cmd := exec.CommandContext(t.Context(), parser, "-QK")
		cmd.Stdin = strings.NewReader(spec.AppArmorProfile(in))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s -QK with %+v: %v\n%s", parser, in, err, out)
		}
	}
}

// TestAppArmorNote: the verbose Status says what RuntimeDefault gets.
func TestAppArmorNote(t *testing.T) {
	_, noParser := appArmorParser()
	missing := "the daemon loads for the first container that needs it"
	if noParser != nil {
		missing = "containers that need it (RuntimeDefault, unset) are refused"
	}
	for _, tc := range []struct {
		name string
		node fakeAppArmor
		want string
	}{
		{"disabled", fakeAppArmor{}, "AppArmor is not available on this node"},
		{"loaded", fakeAppArmor{enabled: true, have: []string{DefaultAppArmorProfile}}, `RuntimeDefault and unset apply the profile "crijournal-default"`},
		{"unreadable", fakeAppArmor{enabled: true, listErr: errors.New("EACCES")}, "loaded profiles not readable: EACCES"},
		{"missing", fakeAppArmor{enabled: true}, missing},
	} {
		aa, _ := tc.node.start()
		if got := appArmorNote(aa); !strings.Contains(got, tc.want) {
			t.Errorf("%s: note %q does not say %q", tc.name, got, tc.want)
		}
	}
}
