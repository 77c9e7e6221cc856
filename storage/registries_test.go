package storage

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/types"
)

// nodeConf writes a registries.conf and drop-ins into a fresh directory and returns the
// paths of the file and of the drop-in directory.
func nodeConf(t *testing.T, main string, dropIns map[string]string) (conf, confDir string) {
	t.Helper()
	dir := t.TempDir()
	conf, confDir = filepath.Join(dir, "registries.conf"), filepath.Join(dir, "registries.conf.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, content := range dropIns {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return conf, confDir
}

// prepared runs prepareRegistries into a fresh cache directory and returns the context.
func prepared(t *testing.T, conf, confDir string, mirrors []Registry) *types.SystemContext {
	t.Helper()
	sys := &types.SystemContext{UserShortNameAliasConfPath: filepath.Join(t.TempDir(), "aliases.conf")}
	if err := prepareRegistries(sys, t.TempDir(), conf, confDir, mirrors); err != nil {
		t.Fatalf("prepareRegistries: %v", err)
	}
	return sys
}

func find(t *testing.T, sys *types.SystemContext, ref string) *sysregistriesv2.Registry {
	t.Helper()
	reg, err := sysregistriesv2.FindRegistry(sys, ref)
	if err != nil {
		t.Fatalf("FindRegistry(%s): %v", ref, err)
	}
	return reg
}

func mirrorLocations(reg *sysregistriesv2.Registry) []string {
	var out []string
	for _, m := range reg.Mirrors {
		out = append(out, m.Location)
	}
	return out
}

// TestMirrorsOnTopOfRegistriesConf checks how crijournal's [[registries]] combine with the
// node's registries.conf and drop-ins: its mirror comes first, the node's mirrors after it,
// a blocked registry stays blocked, a shorter prefix's location is kept, and everything
// else (search registries from a drop-in) is the node's.
func TestMirrorsOnTopOfRegistriesConf(t *testing.T) {
	conf, confDir := nodeConf(t, `
unqualified-search-registries = ["registry.fedoraproject.org"]

[[registry]]
prefix = "registry.k8s.io"
location = "registry.k8s.io"
[[registry.mirror]]
location = "node-mirror.example:5000"

[[registry]]
prefix = "blocked.example"
location = "blocked.example"
blocked = true

[[registry]]
prefix = "docker.io"
location = "hub.corp.example/dockerhub"
`, map[string]string{
		"10-search.conf": `unqualified-search-registries = ["quay.io"]`,
		"not-conf.txt":   `this is not read`,
	})
	sys := prepared(t, conf, confDir, []Registry{
		{Prefix: "registry.k8s.io", Location: "127.0.0.1:5000", Insecure: true},
		{Prefix: "blocked.example", Location: "127.0.0.1:5001", Insecure: true},
		{Prefix: "docker.io/library", Location: "127.0.0.1:5002/library", Insecure: true},
		{Prefix: "gcr.io", Location: "127.0.0.1:5003"},
	})

	k8s := find(t, sys, "registry.k8s.io/pause")
	if got, want := mirrorLocations(k8s), []string{"127.0.0.1:5000", "node-mirror.example:5000"}; !slices.Equal(got, want) {
		t.Errorf("registry.k8s.io mirrors = %v, want %v (crijournal's first, then the node's)", got, want)
	}
	if !k8s.Mirrors[0].Insecure || k8s.Mirrors[1].Insecure || k8s.Location != "registry.k8s.io" {
		t.Errorf("registry.k8s.io = %+v: want crijournal's mirror insecure, the node's not, location kept", k8s)
	}
	if b := find(t, sys, "blocked.example/app"); b == nil || !b.Blocked {
		t.Errorf("blocked.example = %+v: a registry the node blocks must stay blocked", b)
	}
	lib := find(t, sys, "docker.io/library/busybox")
	if lib.Location != "hub.corp.example/dockerhub/library" || !slices.Equal(mirrorLocations(lib), []string{"127.0.0.1:5002/library"}) {
		t.Errorf("docker.io/library = %+v: want the node's docker.io location with /library and crijournal's mirror", lib)
	}
	if other := find(t, sys, "docker.io/bitnami/redis"); other.Location != "hub.corp.example/dockerhub" || len(other.Mirrors) != 0 {
		t.Errorf("docker.io/bitnami = %+v: the node's docker.io entry should be untouched", other)
	}
	if gcr := find(t, sys, "gcr.io/x/y"); gcr.Location != "gcr.io" || !slices.Equal(mirrorLocations(gcr), []string{"127.0.0.1:5003"}) {
		t.Errorf("gcr.io = %+v: want a new entry with crijournal's mirror", gcr)
	}
	search, err := sysregistriesv2.UnqualifiedSearchRegistries(sys)
	if err != nil || !slices.Equal(search, []string{"quay.io"}) {
		t.Errorf("unqualified-search-registries = %v, %v; want the drop-in's [quay.io]", search, err)
	}
}

// TestRegistriesConfMissingOrInvalid: missing files configure nothing; a broken one is an
// error that names it.
func TestRegistriesConfMissingOrInvalid(t *testing.T) {
	dir := t.TempDir()
	sys := prepared(t, filepath.Join(dir, "none.conf"), filepath.Join(dir, "none.d"), []Registry{{Prefix: "registry.k8s.io", Location: "127.0.0.1:5000"}})
	if reg := find(t, sys, "registry.k8s.io/pause"); reg == nil || !slices.Equal(mirrorLocations(reg), []string{"127.0.0.1:5000"}) {
		t.Errorf("without registries.conf: registry.k8s.io = %+v, want only crijournal's mirror", reg)
	}
	if reg := find(t, sys, "quay.io/x"); reg != nil {
		t.Errorf("without registries.conf: quay.io = %+v, want no entry", reg)
	}

	conf, confDir := nodeConf(t, "[[registry]]\nprefix = \"a.example\"\nlocation = \"a.example\"\n", map[string]string{"20-broken.conf": "this is = not [toml"})
	err := prepareRegistries(&types.SystemContext{}, t.TempDir(), conf, confDir, nil)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(confDir, "20-broken.conf")) {
		t.Errorf("prepareRegistries with a broken drop-in = %v, want an error naming it", err)
	}
}

// TestShortNames resolves short names as registries.conf says: aliases, search
// registries in order, enforcing mode refusing an ambiguous pull, docker.io without
// either.
func TestShortNames(t *testing.T) {
	for _, tc := range []struct {
		name      string
		conf      string
		ref       string
		want      []string // for a pull
		wantLocal []string // for a lookup; nil: same as want
		err       error    // for a pull
	}{
		{name: "no configuration: docker.io", ref: "busybox", want: []string{"docker.io/library/busybox:latest"}},
		{name: "qualified stays", conf: `unqualified-search-registries = ["quay.io"]`, ref: "registry.k8s.io/pause:3.10",
			want: []string{"registry.k8s.io/pause:3.10"}},
		{name: "one search registry", conf: `unqualified-search-registries = ["quay.io"]`, ref: "team/app:1.0",
			want: []string{"quay.io/team/app:1.0"}},
		{name: "alias wins", conf: "unqualified-search-registries = [\"quay.io\", \"docker.io\"]\nshort-name-mode = \"enforcing\"\n[aliases]\n\"app\" = \"registry.example/team/app\"\n",
			ref: "app:2", want: []string{"registry.example/team/app:2"}},
		{name: "permissive tries each", conf: "unqualified-search-registries = [\"quay.io\", \"docker.io\"]\nshort-name-mode = \"permissive\"\n",
			ref: "busybox", want: []string{"quay.io/busybox:latest", "docker.io/library/busybox:latest"}},
		{name: "enforcing refuses ambiguous", conf: "unqualified-search-registries = [\"quay.io\", \"docker.io\"]\nshort-name-mode = \"enforcing\"\n",
			ref: "busybox", err: ErrAmbiguousShortName, wantLocal: []string{"quay.io/busybox:latest", "docker.io/library/busybox:latest"}},
		{name: "digest kept", conf: `unqualified-search-registries = ["quay.io"]`,
			ref:  "app@sha256:0123456789012345678901234567890123456789012345678901234567890123",
			want: []string{"quay.io/app@sha256:0123456789012345678901234567890123456789012345678901234567890123"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, confDir := nodeConf(t, tc.conf, nil)
			s := &Store{sys: prepared(t, conf, confDir, nil), registriesConf: conf}
			got, err := s.candidates(tc.ref, true)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), conf) {
					t.Errorf("candidates(%q) for a pull = %v, %v; want %v naming %s", tc.ref, got, err, tc.err, conf)
				}
			} else if err != nil || !slices.Equal(names(got), tc.want) {
				t.Errorf("candidates(%q) for a pull = %v, %v; want %v", tc.ref, names(got), err, tc.want)
			}
			wantLocal := tc.wantLocal
			if wantLocal == nil {
				wantLocal = tc.want
			}
			if local, err := s.candidates(tc.ref, false); err != nil || !slices.Equal(names(local), wantLocal) {
				t.Errorf("candidates(%q) for a lookup = %v, %v; want %v", tc.ref, names(local), err, wantLocal)
			}
		})
	}
}

func names[T interface{ String() string }](refs []T) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.String()
	}
	return out
}

// TestRegistriesConfDirIsNotOurs refuses a node drop-in directory that is the one
// prepareRegistries rebuilds, which would delete the operator's files.
func TestRegistriesConfDirIsNotOurs(t *testing.T) {
	cache := t.TempDir()
	ours := filepath.Join(cache, "registries.conf.d")
	if err := os.MkdirAll(ours, 0o755); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(ours, "operator.conf")
	if err := os.WriteFile(keep, []byte(`unqualified-search-registries = ["quay.io"]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := prepareRegistries(&types.SystemContext{}, cache, "", ours+"/", nil); err == nil {
		t.Error("prepareRegistries with its own drop-in directory as the node's succeeded")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the operator's drop-in is gone: %v", err)
	}
}
