package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/types"
)

// Registry is a pull mirror that crijournal's own configuration adds on top of the node's
// registries.conf: an image whose qualified name is Prefix, or starts with Prefix followed
// by "/", ":" or "@", is pulled first from the name with Prefix replaced by Location, and
// then, if that fails, from the places registries.conf gives for Prefix (its mirrors, then
// the registry itself). The image is stored under its original name.
//
// For example {Prefix: "registry.k8s.io", Location: "127.0.0.1:5000", Insecure: true} pulls
// registry.k8s.io/pause:3.10 from http://127.0.0.1:5000/pause:3.10 first.
type Registry struct {
	// Prefix is a registry host ("registry.k8s.io") or a host and a repository path
	// ("docker.io/library"). Short names are qualified before they are matched.
	Prefix string
	// Location is host[:port][/path], without a scheme.
	Location string
	// Insecure allows plain HTTP, and HTTPS without certificate verification, with
	// Location.
	Insecure bool
}

func (r Registry) validate() error {
	for _, f := range []struct{ name, value string }{{"prefix", r.Prefix}, {"location", r.Location}} {
		switch {
		case f.value == "":
			return fmt.Errorf("registry %s must be set", f.name)
		case strings.Contains(f.value, "://"):
			return fmt.Errorf("registry %s %q: must be host[:port][/path] without a scheme (set Insecure for plain HTTP)", f.name, f.value)
		case strings.ContainsAny(f.value, " \t\n") || strings.HasPrefix(f.value, "/"):
			return fmt.Errorf("registry %s %q: must be host[:port][/path]", f.name, f.value)
		}
	}
	return nil
}

func validateRegistries(regs []Registry) error {
	var errs []error
	seen := map[string]bool{}
	for _, r := range regs {
		if err := r.validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[r.Prefix] {
			errs = append(errs, fmt.Errorf("registry prefix %q given twice", r.Prefix))
		}
		seen[r.Prefix] = true
	}
	return errors.Join(errs...)
}

// mirrorsDropIn is the name of the drop-in that holds crijournal's own mirrors. It sorts
// after every copied drop-in of the node (they are all named "50-<name>").
const mirrorsDropIn = "99-crijournal-mirrors.conf"

// prepareRegistries makes containers/image read the node's registries configuration, conf
// (registries.conf) and confDir (registries.conf.d), with mirrors added on top, and points
// sys at it. Either may be "" or missing: then it configures nothing.
//
// containers/image reads one main file and one drop-in directory. The main file is conf
// itself; the drop-in directory is dir/registries.conf.d, rebuilt at every Open from copies
// of confDir's drop-ins (renamed "50-<name>", which keeps their order) and a last drop-in
// with one [[registry]] per mirror: the registry that registries.conf gives for the
// mirror's prefix, with the mirror first in its mirror list. So registries.conf decides
// everything else (blocked, insecure, its own mirrors after ours, search registries,
// aliases, short-name mode), and a blocked registry stays blocked whatever the mirrors say.
func prepareRegistries(sys *types.SystemContext, dir, conf, confDir string, mirrors []Registry) error {
	main := filepath.Join(dir, "registries.conf")
	if conf != "" {
		if _, err := os.Stat(conf); err == nil {
			main = conf
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("registries configuration %s: %w", conf, err)
		}
	}
	if main != conf {
		note := "# Written by crijournal: the node has no registries.conf (" + conf + ").\n"
		if err := writeAtomic(main, []byte(note)); err != nil {
			return fmt.Errorf("registries configuration: %w", err)
		}
	}
	dropIns := filepath.Join(dir, "registries.conf.d")
	if confDir != "" && filepath.Clean(confDir) == dropIns {
		return fmt.Errorf("registries configuration: the drop-in directory %s is the one crijournal rebuilds at every start: use another", confDir)
	}
	if err := os.RemoveAll(dropIns); err != nil {
		return fmt.Errorf("registries configuration: %w", err)
	}
	if err := os.MkdirAll(dropIns, 0o700); err != nil {
		return fmt.Errorf("registries configuration: %w", err)
	}

	// The node's files alone first: their errors name them, and the mirrors need what
	// they say about each prefix.
	node := &types.SystemContext{SystemRegistriesConfPath: main, SystemRegistriesConfDirPath: dropIns}
	if confDir != "" {
		node.SystemRegistriesConfDirPath = confDir
	}
	sysregistriesv2.InvalidateCache() // it caches parsed files by path
	if _, err := sysregistriesv2.TryUpdatingCache(node); err != nil {
		return fmt.Errorf("registries configuration: %w", err)
	}
	if err := copyDropIns(confDir, dropIns); err != nil {
		return err
	}
	if len(mirrors) > 0 {
		var entries []registryEntry
		for _, m := range mirrors {
			base, err := sysregistriesv2.FindRegistry(node, m.Prefix)
			if err != nil {
				return fmt.Errorf("registries configuration: %w", err)
			}
			entries = append(entries, withMirror(m, base))
		}
		data, err := toml.Marshal(registriesDropIn{Registry: entries})
		if err != nil {
			return fmt.Errorf("registries configuration: %w", err)
		}
		head := "# Written by crijournal at every start: the mirrors of its [[registries]] configuration,\n" +
			"# each added first to what " + conf + " says about its prefix.\n"
		if err := writeAtomic(filepath.Join(dropIns, mirrorsDropIn), append([]byte(head), data...)); err != nil {
			return fmt.Errorf("registries configuration: %w", err)
		}
	}

	sys.SystemRegistriesConfPath = main
	sys.SystemRegistriesConfDirPath = dropIns
	sysregistriesv2.InvalidateCache()
	if _, err := sysregistriesv2.TryUpdatingCache(sys); err != nil {
		return fmt.Errorf("registries configuration with crijournal's mirrors: %w", err)
	}
	return nil
}

// copyDropIns copies the *.conf files of from (which may be "" or missing) into to, each
// renamed "50-<name>".
func copyDropIns(from, to string) error {
	if from == "" {
		return nil
	}
	entries, err := os.ReadDir(from) // sorted by name, as containers/image reads them
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("registries configuration: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".conf") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return fmt.Errorf("registries configuration: %w", err)
		}
		if err := os.WriteFile(filepath.Join(to, "50-"+e.Name()), data, 0o600); err != nil {
			return fmt.Errorf("registries configuration: %w", err)
		}
	}
	return nil
}

// withMirror returns the [[registry]] entry for m.Prefix: what the node's configuration
// says about it (base, the entry whose prefix matches m.Prefix best, or nil), with m first
// among the mirrors.
func withMirror(m Registry, base *sysregistriesv2.Registry) registryEntry {
	e := registryEntry{Prefix: m.Prefix, Location: m.Prefix}
	if base != nil {
		e.Blocked = base.Blocked
		switch {
		case base.Prefix == m.Prefix:
			e.Location, e.Insecure, e.MirrorByDigestOnly = base.Location, base.Insecure, base.MirrorByDigestOnly
			for _, bm := range base.Mirrors {
				e.Mirrors = append(e.Mirrors, endpointEntry{Location: bm.Location, Insecure: bm.Insecure, PullFromMirror: bm.PullFromMirror})
			}
		case !strings.HasPrefix(base.Prefix, "*."):
			// A shorter prefix such as docker.io for docker.io/library: keep its location.
			e.Location, e.Insecure = base.Location+strings.TrimPrefix(m.Prefix, base.Prefix), base.Insecure
		}
	}
	e.Mirrors = slices.Insert(e.Mirrors, 0, endpointEntry{Location: m.Location, Insecure: m.Insecure})
	return e
}

// registriesDropIn is the part of containers' registries.conf (version 2) we write.
type registriesDropIn struct {
	Registry []registryEntry `toml:"registry"`
}

type registryEntry struct {
	Prefix             string          `toml:"prefix"`
	Location           string          `toml:"location"`
	Insecure           bool            `toml:"insecure"`
	Blocked            bool            `toml:"blocked"`
	MirrorByDigestOnly bool            `toml:"mirror-by-digest-only"`
	Mirrors            []endpointEntry `toml:"mirror"`
}

type endpointEntry struct {
	Location       string `toml:"location"`
	Insecure       bool   `toml:"insecure"`
	PullFromMirror string `toml:"pull-from-mirror,omitempty"`
}

// writeAtomic replaces path with data.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// registryBlocked returns ErrRegistryBlocked when the registries configuration blocks the
// registry of named.
func (s *Store) registryBlocked(named reference.Named) error {
	reg, err := sysregistriesv2.FindRegistry(s.sys, named.Name())
	if err != nil {
		return fmt.Errorf("registries configuration: %w", err)
	}
	if reg != nil && reg.Blocked {
		return fmt.Errorf("%w: %q is blocked by [[registry]] prefix %q in %s", ErrRegistryBlocked, named.Name(), reg.Prefix, s.registriesSource())
	}
	return nil
}

// registriesSource names the node's registries configuration for messages.
func (s *Store) registriesSource() string {
	var files []string
	for _, f := range []string{s.registriesConf, s.registriesConfDir} {
		if f != "" {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return "the registries configuration"
	}
	return strings.Join(files, " or ")
}

// candidates returns the qualified names ref may stand for, in the order to try them.
//
// A fully qualified name is itself. A short name ("busybox", "library/busybox:1.36") is
// resolved as registries.conf says: its short-name alias if there is one; else each of the
// unqualified-search-registries in turn (a pull refuses a short name that more than one of
// them could serve when short-name-mode is "enforcing": nobody can be asked to choose);
// else, when registries.conf configures neither, docker.io, as the kubelet and Docker
// qualify names. A name without tag or digest gets ":latest" in every case.
func (s *Store) candidates(ref string, forPull bool) ([]reference.Named, error) {
	if ref == "" {
		return nil, fmt.Errorf("empty reference: %w", ErrInvalidReference)
	}
	dockerIO, err := normalize(ref) // also validates ref
	if err != nil {
		return nil, err
	}
	if !isShortName(ref) {
		return []reference.Named{dockerIO}, nil
	}
	repo := ref // the short name without tag or digest
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	// withTagOf gives named the tag or digest dockerIO has (":latest" at least).
	withTagOf := func(named reference.Named) (reference.Named, error) {
		switch t := dockerIO.(type) {
		case reference.Canonical:
			return reference.WithDigest(named, t.Digest())
		case reference.NamedTagged:
			return reference.WithTag(named, t.Tag())
		}
		return reference.TagNameOnly(named), nil
	}
	alias, _, err := sysregistriesv2.ResolveShortNameAlias(s.sys, repo)
	if err != nil {
		return nil, fmt.Errorf("%q: %w: %v", ref, ErrInvalidReference, err)
	}
	if alias != nil {
		named, err := withTagOf(alias)
		if err != nil {
			return nil, fmt.Errorf("%q: %w: %v", ref, ErrInvalidReference, err)
		}
		return []reference.Named{named}, nil
	}
	search, origin, err := sysregistriesv2.UnqualifiedSearchRegistriesWithOrigin(s.sys)
	if err != nil {
		return nil, fmt.Errorf("registries configuration: %w", err)
	}
	if len(search) == 0 {
		return []reference.Named{dockerIO}, nil
	}
	if forPull && len(search) > 1 {
		mode, err := sysregistriesv2.GetShortNameMode(s.sys)
		if err != nil {
			return nil, fmt.Errorf("registries configuration: %w", err)
		}
		if mode == types.ShortNameModeEnforcing {
			return nil, fmt.Errorf("%w: %q could come from any of the unqualified-search-registries %s of %s, and short-name-mode is \"enforcing\": use a fully qualified name, or add a short-name alias",
				ErrAmbiguousShortName, ref, strings.Join(search, ", "), origin)
		}
	}
	var out []reference.Named
	for _, reg := range search {
		named, err := reference.ParseNormalizedNamed(reg + "/" + repo)
		if err != nil {
			return nil, fmt.Errorf("%q with unqualified-search registry %q: %w: %v", ref, reg, ErrInvalidReference, err)
		}
		if named, err = withTagOf(named); err != nil {
			return nil, fmt.Errorf("%q: %w: %v", ref, ErrInvalidReference, err)
		}
		out = append(out, named)
	}
	return out, nil
}

// isShortName reports whether ref names no registry: its first path component has no "."
// or ":" and is not "localhost" (containers/image's rule), or it has a single component.
func isShortName(ref string) bool {
	first, _, found := strings.Cut(ref, "/")
	return !found || (!strings.ContainsAny(first, ".:") && first != "localhost")
}

// normalize qualifies an image reference as the kubelet and Docker do: docker.io for a name
// without a registry, library/ for a single-component docker.io name, ":latest" for a name
// without tag or digest. A name with both a tag and a digest keeps only the digest.
func normalize(ref string) (reference.Named, error) {
	if ref == "" {
		return nil, fmt.Errorf("empty reference: %w", ErrInvalidReference)
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("%q: %w: %v", ref, ErrInvalidReference, err)
	}
	if canonical, ok := named.(reference.Canonical); ok {
		if _, tagged := named.(reference.NamedTagged); tagged {
			named, err = reference.WithDigest(reference.TrimNamed(named), canonical.Digest())
			if err != nil {
				return nil, fmt.Errorf("%q: %w: %v", ref, ErrInvalidReference, err)
			}
		}
	}
	return reference.TagNameOnly(named), nil
}

// isLoopbackRegistry reports whether the registry of named is on a loopback address, which
// may be plain HTTP (as Docker and CRI-O allow for 127.0.0.0/8).
func isLoopbackRegistry(named reference.Named) bool {
	host := reference.Domain(named)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
