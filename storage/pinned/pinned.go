// Package pinned matches image names against the patterns of the pinned_images key: the
// images the kubelet's image garbage collection must leave, which ListImages and
// ImageStatus report with Image.pinned set. The kubelet skips them in
// imagesInEvictionOrder (pkg/kubelet/images/image_gc_manager.go, Kubernetes v1.37.2),
// both when the image file system is over imageGCHighThresholdPercent and when an image
// is older than imageMaximumGCAge.
//
// A pattern is one of three kinds, as CRI-O's pinned_images (crio.conf(5)):
//
//   - exact: a fully qualified name with a tag or a digest, such as
//     registry.k8s.io/pause:3.10 or registry.k8s.io/pause@sha256:<hex>, matches that
//     name;
//   - glob: a prefix followed by one *, such as registry.k8s.io/pause:* or
//     quay.io/myorg/*, matches every name that starts with the prefix;
//   - keyword: * at both ends, such as *pause*, matches every name that contains the
//     keyword.
//
// Matching ignores case, as CRI-O's does. A glob is anchored at the start of the name,
// as CRI-O documents it (CRI-O's own regular expression is not anchored, so that its
// quay.io/* also matches example.com/quay.io/x; here it does not). An image matches when
// any of its names does: its tagged names (repo tags) and its names by digest (repo
// digests), all fully qualified, as crictl images shows them.
//
// Patterns that could never match are refused rather than silently ignored: an exact name
// that is not fully qualified ("busybox:1.36", which the store names
// docker.io/library/busybox:1.36), or that has no tag and no digest, or both; a * anywhere
// but at the end, or at both ends.
package pinned

import (
	"errors"
	"fmt"
	"strings"

	"go.podman.io/image/v5/docker/reference"
)

// ErrInvalidPattern is wrapped by the errors of Parse.
var ErrInvalidPattern = errors.New("invalid pinned image pattern")

// Patterns is a parsed list of patterns. The zero value matches nothing.
type Patterns struct {
	exact    []string // lower case
	prefixes []string // globs without their *, lower case
	keywords []string // keywords without their *s, lower case
}

// Parse parses patterns; the error names every invalid one.
func Parse(patterns []string) (Patterns, error) {
	var p Patterns
	var errs []error
	for _, pattern := range patterns {
		if err := p.add(pattern); err != nil {
			errs = append(errs, fmt.Errorf("%w %q: %v", ErrInvalidPattern, pattern, err))
		}
	}
	if len(errs) > 0 {
		return Patterns{}, errors.Join(errs...)
	}
	return p, nil
}

func (p *Patterns) add(pattern string) error {
	lower := strings.ToLower(pattern)
	switch inner, _ := strings.CutSuffix(lower, "*"); {
	case pattern == "":
		return errors.New("empty")
	case len(pattern) >= 2 && strings.HasPrefix(pattern, "*") && strings.HasSuffix(pattern, "*"):
		keyword := lower[1 : len(lower)-1]
		if strings.Contains(keyword, "*") {
			return errors.New("a * may only end a glob or surround a keyword")
		}
		p.keywords = append(p.keywords, keyword)
	case strings.Contains(inner, "*"):
		return errors.New("a * may only end a glob or surround a keyword")
	case inner != lower:
		p.prefixes = append(p.prefixes, inner)
	default:
		if err := checkExact(pattern); err != nil {
			return err
		}
		p.exact = append(p.exact, lower)
	}
	return nil
}

// checkExact refuses an exact name that no image in the store could have.
func checkExact(name string) error {
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return fmt.Errorf("not an image name: %v", err)
	}
	if q := named.String(); q != name {
		return fmt.Errorf("not fully qualified: the store names this image %s", q)
	}
	_, tagged := named.(reference.Tagged)
	_, digested := named.(reference.Digested)
	switch {
	case !tagged && !digested:
		return fmt.Errorf("no tag and no digest: name one, or write %s:* for every tag", name)
	case tagged && digested:
		return errors.New("both a tag and a digest: the store names an image by one or the other")
	}
	return nil
}

// Empty reports whether p matches nothing.
func (p Patterns) Empty() bool {
	return len(p.exact) == 0 && len(p.prefixes) == 0 && len(p.keywords) == 0
}

// Match reports whether any of names matches a pattern.
func (p Patterns) Match(names ...string) bool {
	for _, name := range names {
		if p.match(strings.ToLower(name)) {
			return true
		}
	}
	return false
}

func (p Patterns) match(name string) bool {
	for _, e := range p.exact {
		if name == e {
			return true
		}
	}
	for _, prefix := range p.prefixes {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	for _, k := range p.keywords {
		if strings.Contains(name, k) {
			return true
		}
	}
	return false
}
