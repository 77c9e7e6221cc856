//lint:file-ignore SA1019 the tests cover the deprecated profile strings older kubelets send.

package oci

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/crijournal/crijournal/internal/testenv"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSpecAppArmor(t *testing.T) {
	loaded := func(names ...string) func(string) (bool, error) {
		return func(n string) (bool, error) { return slices.Contains(names, n), nil }
	}
	off := appArmorHost{}
	on := appArmorHost{enabled: true, loaded: loaded("mine", DefaultAppArmorProfile)}
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
			s, err := buildSpec(t.Context(), in, h)
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
func (f fakeAppArmor) start() (appArmorHost, func() []string) {
	var mu sync.Mutex
	have := map[string]bool{}
	for _, n := range f.have {
		have[n] = true
	}
	var loads []string
	aa := appArmorHost{enabled: f.enabled, loaded: func(name string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return have[name], f.listErr
	}}
	if !f.noLoad {
		aa.load = func(_ context.Context, name, text string) error {
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
			h.apparmor, loads = tc.node.start()
			s, err := buildSpec(t.Context(), in, h)
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
				t.Fatalf("buildSpec: %v", err)
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
	text := appArmorProfile(appArmorProfileInput{Name: "crijournal-test"})
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
		testenv.Need(t, "%v: install Debian's apparmor package (make deps does)", err)
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
