//lint:file-ignore SA1019 the tests cover the deprecated profile strings older kubelets send.

package spec

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSpecAppArmor(t *testing.T) {
	loaded := func(names ...string) func(string) (bool, error) {
		return func(n string) (bool, error) { return slices.Contains(names, n), nil }
	}
	off := AppArmorHost{}
	on := AppArmorHost{Enabled: true, Loaded: loaded("mine", DefaultAppArmorProfile)}
	for _, tc := range []struct {
		name       string
		aa         AppArmorHost
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
			h.AppArmor = tc.aa
			s, err := Build(t.Context(), in, h)
			if tc.want == "-" {
				requireInvalidSpec(t, err, tc.errMention)
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if s.Process.ApparmorProfile != tc.want {
				t.Fatalf("apparmorProfile = %q, want %q", s.Process.ApparmorProfile, tc.want)
			}
		})
	}
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
func (f fakeAppArmor) start() (AppArmorHost, func() []string) {
	var mu sync.Mutex
	have := map[string]bool{}
	for _, n := range f.have {
		have[n] = true
	}
	var loads []string
	aa := AppArmorHost{Enabled: f.enabled, Loaded: func(name string) (bool, error) {
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

// TestSpecAppArmorDefaultLoad: the default profile is generated and loaded when a
// container needs it and it is missing, never reloaded when loaded, and a container
// that needs it is refused when it cannot be loaded.
func TestSpecAppArmorDefaultLoad(t *testing.T) {
	runtimeDefault := func(s *runtimeapi.LinuxContainerSecurityContext) {
		s.Apparmor = profile(runtimeapi.SecurityProfile_RuntimeDefault, "")
	}
	unset := func(*runtimeapi.LinuxContainerSecurityContext) {}
	loaded := []string{DefaultAppArmorProfile, "mine"}
	for _, tc := range []struct {
		name      string
		node      fakeAppArmor
		edit      func(*runtimeapi.LinuxContainerSecurityContext)
		want      string // the profile applied; "-" means refused with ErrNoDefaultAppArmor
		wantLoads int
		mention   string // in the refusal
	}{
		{name: "missing: generated, loaded, applied", node: fakeAppArmor{enabled: true},
			edit: runtimeDefault, want: DefaultAppArmorProfile, wantLoads: 1},
		{name: "missing, unset: generated, loaded, applied", node: fakeAppArmor{enabled: true},
			edit: unset, want: DefaultAppArmorProfile, wantLoads: 1},
		{name: "loaded: applied, not reloaded", node: fakeAppArmor{enabled: true, have: loaded},
			edit: runtimeDefault, want: DefaultAppArmorProfile},
		{name: "load fails: refused", node: fakeAppArmor{enabled: true, loadErr: errors.New("parser says no")},
			edit: runtimeDefault, want: "-", wantLoads: 1, mention: "loading it failed: parser says no"},
		{name: "load fails, unset: refused", node: fakeAppArmor{enabled: true, loadErr: errNoAppArmorParser},
			edit: unset, want: "-", wantLoads: 1, mention: "apparmor_parser not found"},
		{name: "no loader: refused", node: fakeAppArmor{enabled: true, noLoad: true},
			edit: runtimeDefault, want: "-", mention: "cannot load profiles"},
		{name: "loaded profiles unreadable: refused", node: fakeAppArmor{enabled: true, listErr: errors.New("EACCES")},
			edit: runtimeDefault, want: "-", mention: "EACCES"},
		{name: "disabled node: nothing loaded, no profile", node: fakeAppArmor{},
			edit: runtimeDefault, want: ""},
		{name: "disabled node, unset: nothing loaded, no profile", node: fakeAppArmor{},
			edit: unset, want: ""},
		{name: "privileged: nothing loaded, no profile", node: fakeAppArmor{enabled: true},
			edit: func(s *runtimeapi.LinuxContainerSecurityContext) { s.Privileged = true }, want: ""},
		{name: "privileged RuntimeDefault: nothing loaded, no profile", node: fakeAppArmor{enabled: true, loadErr: errNoAppArmorParser},
			edit: func(s *runtimeapi.LinuxContainerSecurityContext) { s.Privileged = true; runtimeDefault(s) }, want: ""},
		{name: "Unconfined: nothing loaded", node: fakeAppArmor{enabled: true},
			edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
				s.Apparmor = profile(runtimeapi.SecurityProfile_Unconfined, "")
			}, want: ""},
		{name: "Localhost: applied, the default not loaded", node: fakeAppArmor{enabled: true, have: []string{"mine"}},
			edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
				s.Apparmor = profile(runtimeapi.SecurityProfile_Localhost, "mine")
			}, want: "mine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			tc.edit(sc(&in))
			h := testHost()
			var loads func() []string
			h.AppArmor, loads = tc.node.start()
			s, err := Build(t.Context(), in, h)
			if n := len(loads()); n != tc.wantLoads {
				t.Fatalf("%d loads, want %d", n, tc.wantLoads)
			}
			for _, text := range loads() {
				if !strings.Contains(text, "profile "+DefaultAppArmorProfile+" ") || !strings.Contains(text, "deny mount,") {
					t.Fatalf("loaded a text that is not the default profile:\n%s", text)
				}
			}
			if tc.want == "-" {
				if !errors.Is(err, ErrNoDefaultAppArmor) || errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.mention) {
					t.Fatalf("err = %v, want ErrNoDefaultAppArmor saying %q", err, tc.mention)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if s.Process.ApparmorProfile != tc.want {
				t.Fatalf("apparmorProfile = %q, want %q", s.Process.ApparmorProfile, tc.want)
			}
		})
	}
}

// TestSpecAppArmorDefaultLoadCanceled: a load that the request's end stopped is the
// request's error, not the node's.
func TestSpecAppArmorDefaultLoadCanceled(t *testing.T) {
	aa, _ := fakeAppArmor{enabled: true, loadErr: context.Canceled}.start()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := appArmorFor(ctx, &runtimeapi.LinuxContainerSecurityContext{}, aa)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrNoDefaultAppArmor) {
		t.Fatalf("err = %v, want context.Canceled and not ErrNoDefaultAppArmor", err)
	}
}

// TestSpecAppArmorDefaultLoadOnce: containers created together load the missing
// default profile once.
func TestSpecAppArmorDefaultLoadOnce(t *testing.T) {
	aa, loads := fakeAppArmor{enabled: true}.start()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if p, err := appArmorFor(t.Context(), &runtimeapi.LinuxContainerSecurityContext{}, aa); err != nil || p != DefaultAppArmorProfile {
				t.Errorf("appArmorFor = %q, %v", p, err)
			}
		})
	}
	wg.Wait()
	if n := len(loads()); n != 1 {
		t.Fatalf("%d loads, want 1", n)
	}
}

// TestAppArmorProfileText: the default profile names itself, confines with the
// rules it follows (containerd's default), and is the same text for the same input.
func TestAppArmorProfileText(t *testing.T) {
	full := AppArmorProfileInput{Name: DefaultAppArmorProfile, Daemon: "crijournald", ABI: true, Tunables: true, Base: true}
	text := AppArmorProfile(full)
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
	if again := AppArmorProfile(full); again != text {
		t.Errorf("the same input gave two texts:\n%s\n---\n%s", text, again)
	}
	if strings.Count(text, "{") != strings.Count(text, "}") {
		t.Errorf("unbalanced braces:\n%s", text)
	}

	bare := AppArmorProfile(AppArmorProfileInput{Name: DefaultAppArmorProfile, Daemon: "unconfined"})
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

	spaced := AppArmorProfile(AppArmorProfileInput{Name: DefaultAppArmorProfile, Daemon: "my daemon"})
	if !strings.Contains(spaced, `signal (receive) peer="my daemon",`) {
		t.Errorf("a daemon profile with a space is not quoted:\n%s", spaced)
	}
	for _, bad := range []string{"a,b", `a"b`, "a\nb", "{x}"} {
		if p := AppArmorProfile(AppArmorProfileInput{Name: DefaultAppArmorProfile, Daemon: bad}); strings.Contains(p, bad) {
			t.Errorf("the daemon profile %q, which the policy language cannot hold, is in the profile:\n%s", bad, p)
		}
	}
}

// errNoAppArmorParser is the error oci's loader gives on a node without apparmor_parser.
var errNoAppArmorParser = errors.New("apparmor_parser not found in $PATH, /sbin or /usr/sbin (install the apparmor package)")
