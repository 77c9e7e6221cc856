//lint:file-ignore SA1019 the tests cover the deprecated profile strings older kubelets send.

package oci

import (
	"path/filepath"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSpecAppArmor(t *testing.T) {
	loaded := func(names ...string) func(string) (bool, error) {
		return func(n string) (bool, error) { return slices.Contains(names, n), nil }
	}
	off := appArmorHost{}
	on := appArmorHost{enabled: true, loaded: loaded("mine", DefaultAppArmorProfile)}
	onNoDefault := appArmorHost{enabled: true, loaded: loaded("mine")}
	for _, tc := range []struct {
		name       string
		aa         appArmorHost
		edit       func(*runtimeapi.LinuxContainerSecurityContext)
		want       string // the profile; "-" means refused
		errMention string
	}{
		{name: "off: unset runs", aa: off, edit: func(*runtimeapi.LinuxContainerSecurityContext) {}, want: ""},
		{name: "off: RuntimeDefault runs", aa: off, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = profile(runtimeapi.SecurityProfile_RuntimeDefault, "")
		}, want: ""},
		{name: "off: Unconfined runs", aa: off, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = profile(runtimeapi.SecurityProfile_Unconfined, "")
		}, want: ""},
		{name: "off: Localhost refused", aa: off, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = profile(runtimeapi.SecurityProfile_Localhost, "mine")
		}, want: "-", errMention: "AppArmor is not available on this node"},
		{name: "off: deprecated localhost/ refused", aa: off, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.ApparmorProfile = "localhost/mine"
		}, want: "-", errMention: "AppArmor is not available on this node"},
		{name: "off: privileged Localhost refused too", aa: off, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Privileged = true
			s.Apparmor = profile(runtimeapi.SecurityProfile_Localhost, "mine")
		}, want: "-", errMention: "not available"},
		{name: "off: deprecated unknown name", aa: off, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.ApparmorProfile = "docker/default"
		}, want: "-", errMention: `"docker/default"`},
		{name: "on: Localhost applied", aa: on, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = profile(runtimeapi.SecurityProfile_Localhost, "mine")
		}, want: "mine"},
		{name: "on: Localhost with the old prefix", aa: on, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = profile(runtimeapi.SecurityProfile_Localhost, "localhost/mine")
		}, want: "mine"},
		{name: "on: Localhost not loaded refused", aa: on, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = profile(runtimeapi.SecurityProfile_Localhost, "theirs")
		}, want: "-", errMention: `"theirs" is not loaded`},
		{name: "on: RuntimeDefault applies the loaded default", aa: on, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = profile(runtimeapi.SecurityProfile_RuntimeDefault, "")
		}, want: DefaultAppArmorProfile},
		{name: "on: unset applies the loaded default", aa: on, edit: func(*runtimeapi.LinuxContainerSecurityContext) {}, want: DefaultAppArmorProfile},
		{name: "on: RuntimeDefault without a loaded default runs", aa: onNoDefault, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Apparmor = profile(runtimeapi.SecurityProfile_RuntimeDefault, "")
		}, want: ""},
		{name: "on: privileged gets no default", aa: on, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Privileged = true
		}, want: ""},
		{name: "on: Unconfined", aa: on, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.ApparmorProfile = "unconfined"
		}, want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			tc.edit(sc(&in))
			h := testHost()
			h.apparmor = tc.aa
			s, err := buildSpec(in, h)
			if tc.want == "-" {
				requireInvalidSpec(t, err, tc.errMention)
				return
			}
			if err != nil {
				t.Fatalf("buildSpec: %v", err)
			}
			if s.Process.ApparmorProfile != tc.want {
				t.Fatalf("apparmorProfile = %q, want %q", s.Process.ApparmorProfile, tc.want)
			}
		})
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
