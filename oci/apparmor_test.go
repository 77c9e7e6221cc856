//lint:file-ignore SA1019 the tests cover the deprecated profile strings older kubelets send.

package oci

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// TestAppArmorProfileText: the default profile names itself, confines with the
// rules it follows (containerd's default), and is the same text for the same input.
func TestAppArmorProfileText(t *testing.T) {
	full := appArmorProfileInput{Name: DefaultAppArmorProfile, Daemon: "crijournald", ABI: true, Tunables: true, Base: true}
	text := appArmorProfile(full)
	for _, want := range []string{
		"abi <abi/3.0>,\n",
		"#include <tunables/global>\n",
		"profile crijournal-default flags=(attach_disconnected,mediate_deleted) {\n",
		"  #include <abstractions/base>\n",
		"  signal (receive) peer=unconfined,\n",
		"  signal (receive) peer=runc,\n",
		"  signal (receive) peer=crijournald,\n",
		"  signal (send,receive) peer=crijournal-default,\n",
		"  deny @{PROC}/* w,\n",
		"  deny @{PROC}/sys/[^k]** w,\n",
		"  deny @{PROC}/sysrq-trigger rwklx,\n",
		"  deny @{PROC}/kcore rwklx,\n",
		"  deny mount,\n",
		"  deny /sys/firmware/** rwklx,\n",
		"  deny /sys/kernel/security/** rwklx,\n",
		"  ptrace (trace,tracedby,read,readby) peer=crijournal-default,\n}\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("profile lacks %q:\n%s", want, text)
		}
	}
	if again := appArmorProfile(full); again != text {
		t.Errorf("the same input gave two texts:\n%s\n---\n%s", text, again)
	}
	if strings.Count(text, "{") != strings.Count(text, "}") {
		t.Errorf("unbalanced braces:\n%s", text)
	}

	bare := appArmorProfile(appArmorProfileInput{Name: DefaultAppArmorProfile, Daemon: "unconfined"})
	for _, absent := range []string{"abi <", "#include", "peer=crijournald"} {
		if strings.Contains(bare, absent) {
			t.Errorf("profile without the node's policy files has %q:\n%s", absent, bare)
		}
	}
	if !strings.HasPrefix(bare, "@{PROC}=/proc/\n") {
		t.Errorf("profile without tunables does not define @{PROC}:\n%s", bare)
	}
	if n := strings.Count(bare, "peer=unconfined,"); n != 1 {
		t.Errorf("an unconfined daemon gives %d unconfined peers, want 1", n)
	}

	spaced := appArmorProfile(appArmorProfileInput{Name: DefaultAppArmorProfile, Daemon: "my daemon"})
	if !strings.Contains(spaced, `signal (receive) peer="my daemon",`) {
		t.Errorf("a daemon profile with a space is not quoted:\n%s", spaced)
	}
	for _, bad := range []string{"a,b", `a"b`, "a\nb", "{x}"} {
		if p := appArmorProfile(appArmorProfileInput{Name: DefaultAppArmorProfile, Daemon: bad}); strings.Contains(p, bad) {
			t.Errorf("the daemon profile %q, which the policy language cannot hold, is in the profile:\n%s", bad, p)
		}
	}
}

// TestAppArmorProfileParses: apparmor_parser, where installed, compiles the profile
// without loading it (-Q), with and without the node's policy files.
func TestAppArmorProfileParses(t *testing.T) {
	parser, err := appArmorParser()
	if err != nil {
		t.Skip(err)
	}
	for _, in := range []appArmorProfileInput{
		{Name: DefaultAppArmorProfile, Daemon: "crijournald"},
		readAppArmorProfileInput(DefaultAppArmorProfile),
	} {
		cmd := exec.CommandContext(t.Context(), parser, "-QK")
		cmd.Stdin = strings.NewReader(appArmorProfile(in))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s -QK with %+v: %v\n%s", parser, in, err, out)
		}
	}
}
