package storage

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/docker/distribution/registry/api/errcode"
	v2 "github.com/docker/distribution/registry/api/v2"
	digest "github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/signature"
	istorage "go.podman.io/image/v5/storage"
	"go.podman.io/image/v5/types"
	cstorage "go.podman.io/storage"
)

// minIDPrefix is the shortest image ID prefix ImageStatus and RemoveImage accept, as CRI-O.
const minIDPrefix = 3

// Image is an image in the store.
type Image struct {
	ID          string   // the storage ID: hex digest of the config, no "sha256:"
	RepoTags    []string // qualified names with a tag, sorted: docker.io/library/busybox:latest
	RepoDigests []string // qualified names with a digest, sorted: docker.io/library/busybox@sha256:...
	Size        uint64   // bytes of the unpacked layers plus the image's metadata
	Config      ImageConfig
	// Pinned images are exempt from the kubelet's image garbage collection: those a
	// pattern of Options.PinnedImages matches by a tag or a digest (package pinned).
	Pinned bool
}

// ImageConfig is the part of an image's OCI configuration a container is built from.
type ImageConfig struct {
	User         string
	ExposedPorts []string // "80/tcp", sorted
	Env          []string // "KEY=value"
	Entrypoint   []string
	Cmd          []string
	Volumes      []string // sorted
	WorkingDir   string
	Labels       map[string]string
	StopSignal   string
	Architecture string
	OS           string
}

// Auth is the credentials of a pull, as in CRI's AuthConfig. Username and Password, or Auth
// (base64 of "username:password"), or IdentityToken authenticate to the registry;
// RegistryToken is a bearer token sent as is.
type Auth struct {
	Username, Password, Auth, IdentityToken, RegistryToken string
}

// apply sets the credentials of a on sys.
func (a *Auth) apply(sys *types.SystemContext) error {
	if a == nil {
		return nil
	}
	creds := types.DockerAuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken}
	if a.Auth != "" && a.Username == "" && a.Password == "" {
		raw, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			return fmt.Errorf("auth: not base64: %w", err)
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			return errors.New(`auth: want base64 of "username:password"`)
		}
		creds.Username, creds.Password = user, pass
	}
	if creds != (types.DockerAuthConfig{}) {
		sys.DockerAuthConfig = &creds
	}
	sys.DockerBearerRegistryToken = a.RegistryToken
	return nil
}

// PullImage pulls ref into the store and returns the image. A short name is resolved as
// the registries configuration says (see candidates), and each name it may stand for is
// tried in turn; the image is stored under the name that was pulled, never under a
// mirror's. An invalid reference gives ErrInvalidReference; a tag or digest no registry has
// gives ErrImageNotFound; a blocked registry ErrRegistryBlocked; an image the signature
// policy refuses ErrRejectedByPolicy; a registry that sends nothing for
// Options.PullProgressTimeout ErrPullNoProgress; a full disk ErrDiskFull.
//
// Calls for the same names and credentials at the same time share one pull (see
// pullFlights): a call whose ctx ends returns at once, and the pull goes on for the others,
// until none is left. A failed pull leaves nothing in the store (see pullclean.go).
func (s *Store) PullImage(ctx context.Context, ref string, auth *Auth) (Image, error) {
	names, err := s.candidates(ref, true)
	if err != nil {
		return Image{}, fmt.Errorf("pull: %w", err)
	}
	img, shared, err := s.flights.do(ctx, pullKey(names, auth), func(ctx context.Context) (Image, error) {
		return s.pullGuarded(func() (Image, error) { return s.pullCandidates(ctx, ref, names, auth) })
	})
	if shared {
		s.log.Debug("pull shared with another call for the same image", "ref", ref, "err", err)
	}
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return Image{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	return img, err
}

// pullCandidates pulls the first of names that a registry serves.
func (s *Store) pullCandidates(ctx context.Context, ref string, names []reference.Named, auth *Auth) (Image, error) {
	var errs []error
	for _, named := range names {
		img, err := s.pull(ctx, named, auth)
		if err == nil {
			return img, nil
		}
		if len(names) == 1 || ctx.Err() != nil || errors.Is(err, ErrDiskFull) {
			return Image{}, err
		}
		errs = append(errs, err) // and on to the next, as Podman does
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	// The class of the errors when every candidate failed the same way.
	for _, class := range []error{ErrImageNotFound, ErrRegistryBlocked, ErrRejectedByPolicy, ErrPullNoProgress} {
		if !slices.ContainsFunc(errs, func(err error) bool { return !errors.Is(err, class) }) {
			return Image{}, fmt.Errorf("pull %s: %w in every unqualified-search registry: %s", ref, class, strings.Join(msgs, "; "))
		}
	}
	return Image{}, fmt.Errorf("pull %s: every unqualified-search registry failed: %s", ref, strings.Join(msgs, "; "))
}

// pull pulls one qualified name.
func (s *Store) pull(ctx context.Context, named reference.Named, auth *Auth) (Image, error) {
	if err := s.registryBlocked(named); err != nil {
		return Image{}, fmt.Errorf("pull %s: %w", named, err)
	}
	sys := *s.sys // a shallow copy: every pointer in it is shared, read only
	if err := auth.apply(&sys); err != nil {
		return Image{}, fmt.Errorf("pull %s: %w", named, err)
	}
	if isLoopbackRegistry(named) {
		sys.DockerInsecureSkipTLSVerify = types.OptionalBoolTrue
	}
	srcRef, err := docker.NewReference(named)
	if err != nil {
		return Image{}, fmt.Errorf("pull %s: %w: %v", named, ErrInvalidReference, err)
	}
	destRef, err := istorage.Transport.NewStoreReference(s.st, named, "")
	if err != nil {
		return Image{}, fmt.Errorf("pull %s: %w: %v", named, ErrInvalidReference, err)
	}
	policy, err := s.policyContext()
	if err != nil {
		return Image{}, fmt.Errorf("pull %s: %w", named, err)
	}
	defer policy.Destroy() //nolint:errcheck // nothing to report

	start := time.Now()
	opts := &copy.Options{
		SourceCtx:        &sys,
		DestinationCtx:   &sys,
		RemoveSignatures: true, // verified by the policy, not kept
	}
	copyCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if s.pullProgressTimeout > 0 {
		watch := watchProgress(s.pullProgressTimeout, cancel)
		opts.Progress, opts.ProgressInterval = watch.events, progressInterval
		defer watch.stop() // after copy.Image: it sends no event once it returned
	}
	_, err = copy.Image(copyCtx, policy, destRef, srcRef, opts)
	if err != nil {
		var rejected signature.PolicyRequirementError
		switch cause := context.Cause(copyCtx); {
		case errors.Is(cause, ErrPullNoProgress) && ctx.Err() == nil:
			return Image{}, fmt.Errorf("pull %s: %w", named, cause)
		case isNoSpace(err):
			return Image{}, s.diskFull(named.String(), err)
		case errors.As(err, &rejected):
			return Image{}, fmt.Errorf("pull %s: %w %s: %v", named, ErrRejectedByPolicy, s.policyPath, err)
		case isManifestUnknown(err):
			return Image{}, fmt.Errorf("pull %s: %w: %v", named, ErrImageNotFound, err)
		}
		return Image{}, fmt.Errorf("pull %s: %w", named, err)
	}
	// Durable before it is answered (see durable.go).
	if err := s.syncGraphRoot(); err != nil {
		return Image{}, fmt.Errorf("pull %s: %w", named, err)
	}
	_, img, err := istorage.ResolveReference(destRef)
	if err != nil {
		return Image{}, fmt.Errorf("pull %s: find the pulled image: %w", named, err)
	}
	s.log.Info("image pulled", "ref", named.String(), "id", img.ID, "duration", time.Since(start))
	return s.image(ctx, img)
}

// policyContext reads the signature policy (Options.SignaturePolicy) afresh.
func (s *Store) policyContext() (*signature.PolicyContext, error) {
	policy := &signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}}
	if s.policyPath != "" {
		var err error
		if policy, err = signature.NewPolicyFromFile(s.policyPath); err != nil {
			hint := ""
			if errors.Is(err, fs.ErrNotExist) {
				hint = " (make install installs a permissive default; or set signature_policy)"
			}
			return nil, fmt.Errorf("signature policy %s: %w%s", s.policyPath, err, hint)
		}
	}
	pc, err := signature.NewPolicyContext(policy)
	if err != nil {
		return nil, fmt.Errorf("signature policy %s: %w", s.policyPath, err)
	}
	return pc, nil
}

// isManifestUnknown reports whether err says that the registry has no such repository,
// tag or digest.
func isManifestUnknown(err error) bool {
	var ec errcode.ErrorCoder
	if errors.As(err, &ec) && (ec.ErrorCode() == v2.ErrorCodeManifestUnknown || ec.ErrorCode() == v2.ErrorCodeNameUnknown) {
		return true
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "manifest unknown") || strings.Contains(msg, "name unknown")
}

// ListImages returns every image in the store.
func (s *Store) ListImages(ctx context.Context) ([]Image, error) {
	var out []Image
	err := s.EachImage(ctx, func(img Image) error {
		out = append(out, img)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EachImage hands fn, in turn, every image in the store, each looked up (its
// configuration, names and size) just before fn gets it, so that a caller can send each
// on before the next is read (StreamImages). Only the store's image records are read
// whole first. An image removed meanwhile, or still being pulled, is left out; an error
// from fn, or the context's end, stops it.
func (s *Store) EachImage(ctx context.Context, fn func(Image) error) error {
	imgs, err := s.st.Images()
	if err != nil {
		return fmt.Errorf("list images: %w", err)
	}
	s.pruneConfigs(imgs)
	for i := range imgs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("list images: %w", err)
		}
		img, err := s.image(ctx, &imgs[i])
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, cstorage.ErrImageUnknown) {
			// Still being pulled (no configuration yet), or removed meanwhile.
			s.log.Debug("image skipped from list", "id", imgs[i].ID, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("list images: %w", err)
		}
		if err := fn(img); err != nil {
			return err
		}
	}
	return nil
}

// ImageStatus returns the image ref names: a full ID (with or without "sha256:"), an ID
// prefix of at least 3 hex digits that matches one image, a name with a tag, or a name with
// a digest. ErrImageNotFound when none matches.
func (s *Store) ImageStatus(ctx context.Context, ref string) (Image, error) {
	img, _, err := s.lookup(ref)
	if err != nil {
		return Image{}, fmt.Errorf("image status: %w", err)
	}
	return s.image(ctx, img)
}

// RemoveImage removes an image, by ID, digest or tag, with all its names: removing it by
// one of several tags removes the others too, as the CRI says since cri-api 0.36
// (RemoveImage: "removing the image by a single tag will remove all of its tags"), and as
// containerd and CRI-O do. ErrImageInUse while a storage container uses the image;
// ErrImageNotFound when nothing matches.
func (s *Store) RemoveImage(ctx context.Context, ref string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("remove image %s: %w", ref, err)
	}
	img, _, err := s.lookup(ref)
	if err != nil {
		return fmt.Errorf("remove image: %w", err)
	}
	if _, err := s.st.DeleteImage(img.ID, true); err != nil {
		switch {
		case errors.Is(err, cstorage.ErrImageUsedByContainer):
			return fmt.Errorf("remove image %s: %w: containers %s", img.ID, ErrImageInUse, strings.Join(s.containersOf(img.ID), ", "))
		case errors.Is(err, cstorage.ErrImageUnknown), errors.Is(err, cstorage.ErrNotAnImage):
			return fmt.Errorf("remove image %s: %w", img.ID, ErrImageNotFound)
		}
		return fmt.Errorf("remove image %s: %w", img.ID, err)
	}
	s.configMu.Lock()
	delete(s.configs, img.ID)
	s.configMu.Unlock()
	s.log.Info("image removed", "id", img.ID, "names", img.Names)
	return nil
}

// containersOf returns the IDs of the storage containers made from image id.
func (s *Store) containersOf(id string) []string {
	cs, err := s.st.Containers()
	if err != nil {
		return []string{"(unknown: " + err.Error() + ")"}
	}
	var ids []string
	for _, c := range cs {
		if c.ImageID == id {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// lookup finds the image ref names; named is the qualified name when ref was a name, nil
// when it was an ID.
func (s *Store) lookup(ref string) (img *cstorage.Image, named reference.Named, err error) {
	id := strings.TrimPrefix(ref, "sha256:")
	if id != ref && !isHex(id) {
		return nil, nil, fmt.Errorf("%q: %w: not a hex digest", ref, ErrInvalidReference)
	}
	if len(id) >= minIDPrefix && isHex(id) {
		img, err := s.st.Image(id)
		if err == nil && strings.HasPrefix(img.ID, id) {
			return img, nil, nil
		}
		if id != ref || len(id) == 64 {
			return nil, nil, fmt.Errorf("%s: %w", ref, ErrImageNotFound)
		}
		// Not an ID (or an ambiguous prefix): it may still be a name such as "abc".
	}
	names, err := s.candidates(ref, false)
	if err != nil {
		return nil, nil, err
	}
	for _, named := range names {
		sref, err := istorage.Transport.NewStoreReference(s.st, named, "")
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w: %v", named, ErrInvalidReference, err)
		}
		_, img, err = istorage.ResolveReference(sref)
		if errors.Is(err, istorage.ErrNoSuchImage) || errors.Is(err, cstorage.ErrImageUnknown) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", named, err)
		}
		return img, named, nil
	}
	if len(names) == 1 {
		return nil, nil, fmt.Errorf("%s: %w", names[0], ErrImageNotFound)
	}
	return nil, nil, fmt.Errorf("%s: %w", ref, ErrImageNotFound)
}

func isHex(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return (r < '0' || r > '9') && (r < 'a' || r > 'f')
	})
}

// image builds the Image of a storage image.
func (s *Store) image(ctx context.Context, img *cstorage.Image) (Image, error) {
	cfg, err := s.imageConfig(ctx, img.ID)
	if err != nil {
		return Image{}, err
	}
	out := Image{ID: img.ID, Config: cfg}
	var tags []reference.NamedTagged
	var digests []reference.Canonical
	for _, n := range img.Names {
		named, err := reference.ParseNormalizedNamed(n)
		if err != nil {
			s.log.Warn("image has an invalid name", "id", img.ID, "name", n, "err", err)
			continue
		}
		switch named := named.(type) {
		case reference.Canonical:
			digests = append(digests, named)
		case reference.NamedTagged:
			tags = append(tags, named)
			out.RepoTags = append(out.RepoTags, named.String())
		}
	}
	out.RepoDigests = repoDigests(img, tags, digests)
	slices.Sort(out.RepoTags)
	out.Pinned = s.pinned.Match(out.RepoTags...) || s.pinned.Match(out.RepoDigests...)
	if size, err := s.st.ImageSize(img.ID); err == nil && size >= 0 {
		out.Size = uint64(size)
	}
	return out, nil
}

// repoDigests returns name@digest for each repository the image is named in and each
// manifest digest it has: as CRI-O, it pairs every repository with every digest, since the
// store does not record which registry served which manifest.
func repoDigests(img *cstorage.Image, tags []reference.NamedTagged, digested []reference.Canonical) []string {
	var ds []digest.Digest
	if img.Digest != "" {
		ds = append(ds, img.Digest)
	} else if d, ok := img.BigDataDigests[cstorage.ImageDigestBigDataKey]; ok {
		ds = append(ds, d)
	}
	for _, d := range img.Digests {
		if !slices.Contains(ds, d) {
			ds = append(ds, d)
		}
	}
	set := map[string]bool{}
	for _, d := range digested {
		set[d.String()] = true
	}
	var repos []reference.Named
	for _, t := range tags {
		repos = append(repos, reference.TrimNamed(t))
	}
	for _, d := range digested {
		repos = append(repos, reference.TrimNamed(d))
	}
	for _, repo := range repos {
		for _, d := range ds {
			if c, err := reference.WithDigest(repo, d); err == nil {
				set[c.String()] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// imageConfig reads the configuration of image id, or returns it from the cache.
func (s *Store) imageConfig(ctx context.Context, id string) (ImageConfig, error) {
	s.configMu.Lock()
	cfg, ok := s.configs[id]
	s.configMu.Unlock()
	if ok {
		return cfg.clone(), nil
	}
	ref, err := istorage.Transport.NewStoreReference(s.st, nil, id)
	if err != nil {
		return ImageConfig{}, fmt.Errorf("image %s: %w", id, err)
	}
	src, err := ref.NewImage(ctx, s.sys)
	if err != nil {
		return ImageConfig{}, fmt.Errorf("image %s: %w", id, err)
	}
	defer src.Close()
	oci, err := src.OCIConfig(ctx)
	if err != nil {
		return ImageConfig{}, fmt.Errorf("image %s: config: %w", id, err)
	}
	c := oci.Config
	cfg = ImageConfig{
		User:         c.User,
		Env:          c.Env,
		Entrypoint:   c.Entrypoint,
		Cmd:          c.Cmd,
		WorkingDir:   c.WorkingDir,
		Labels:       c.Labels,
		StopSignal:   c.StopSignal,
		Architecture: oci.Architecture,
		OS:           oci.OS,
	}
	for p := range c.ExposedPorts {
		cfg.ExposedPorts = append(cfg.ExposedPorts, p)
	}
	slices.Sort(cfg.ExposedPorts)
	for v := range c.Volumes {
		cfg.Volumes = append(cfg.Volumes, v)
	}
	slices.Sort(cfg.Volumes)
	s.configMu.Lock()
	s.configs[id] = cfg
	s.configMu.Unlock()
	return cfg.clone(), nil
}

// clone returns a copy of c that shares no slice or map with it.
func (c ImageConfig) clone() ImageConfig {
	c.ExposedPorts = slices.Clone(c.ExposedPorts)
	c.Env = slices.Clone(c.Env)
	c.Entrypoint = slices.Clone(c.Entrypoint)
	c.Cmd = slices.Clone(c.Cmd)
	c.Volumes = slices.Clone(c.Volumes)
	c.Labels = maps.Clone(c.Labels)
	return c
}

// pruneConfigs drops cached configurations of images that are no longer in imgs.
func (s *Store) pruneConfigs(imgs []cstorage.Image) {
	live := make(map[string]bool, len(imgs))
	for _, img := range imgs {
		live[img.ID] = true
	}
	s.configMu.Lock()
	defer s.configMu.Unlock()
	for id := range s.configs {
		if !live[id] {
			delete(s.configs, id)
		}
	}
}
