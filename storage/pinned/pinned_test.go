package pinned

import (
	"errors"
	"strings"
	"testing"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestMatch: each kind of pattern, CRI-O's three (crio.conf(5) pinned_images: "Exact
// matches must match the entire name, glob matches can have a wildcard * at the end, and
// keyword matches can have wildcards on both ends"), matches what it says and nothing
// else, ignoring case.
func TestMatch(t *testing.T) {
	tests := []struct {
		name     string
		patterns []string
		match    []string
		noMatch  []string
	}{
		{
			name:     "none",
			patterns: nil,
			noMatch:  []string{"registry.k8s.io/pause:3.10", ""},
		},
		{
			name:     "exact tag",
			patterns: []string{"registry.k8s.io/pause:3.10"},
			match:    []string{"registry.k8s.io/pause:3.10", "REGISTRY.K8S.IO/PAUSE:3.10"},
			noMatch: []string{"registry.k8s.io/pause:3.1", "registry.k8s.io/pause:3.100", "registry.k8s.io/pause",
				"registry.k8s.io/pause@" + digest, "x.io/registry.k8s.io/pause:3.10"},
		},
		{
			name:     "exact digest",
			patterns: []string{"registry.k8s.io/pause@" + digest},
			match:    []string{"registry.k8s.io/pause@" + digest},
			noMatch:  []string{"registry.k8s.io/pause:3.10", "registry.k8s.io/other@" + digest},
		},
		{
			name:     "glob",
			patterns: []string{"registry.k8s.io/pause:*"},
			match:    []string{"registry.k8s.io/pause:3.10", "registry.k8s.io/pause:latest", "Registry.k8s.io/pause:X"},
			noMatch:  []string{"registry.k8s.io/pause@" + digest, "registry.k8s.io/pause-foo:1", "quay.io/registry.k8s.io/pause:3.10"},
		},
		{
			name:     "glob of a registry",
			patterns: []string{"quay.io/myorg/*"},
			match:    []string{"quay.io/myorg/app:1", "quay.io/myorg/sub/app@" + digest},
			noMatch:  []string{"quay.io/otherorg/app:1", "docker.io/quay.io/myorg/app:1"},
		},
		{
			name:     "star alone is every image",
			patterns: []string{"*"},
			match:    []string{"docker.io/library/busybox:latest", "x"},
		},
		{
			name:     "keyword",
			patterns: []string{"*pause*"},
			match:    []string{"registry.k8s.io/pause:3.10", "example.com/my-PAUSE-image:1", "docker.io/library/x:pause"},
			noMatch:  []string{"registry.k8s.io/paus:3.10", "docker.io/library/busybox:latest"},
		},
		{
			name:     "several",
			patterns: []string{"docker.io/library/busybox:1.36", "quay.io/*", "*agent*"},
			match:    []string{"docker.io/library/busybox:1.36", "quay.io/a/b:c", "example.com/node-agent:2"},
			noMatch:  []string{"docker.io/library/busybox:1.37", "example.com/a:1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(tt.patterns)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.patterns, err)
			}
			if got := p.Empty(); got != (len(tt.patterns) == 0) {
				t.Errorf("Empty() = %v with patterns %q", got, tt.patterns)
			}
			for _, name := range tt.match {
				if !p.Match(name) {
					t.Errorf("%q does not match %q, want a match", name, tt.patterns)
				}
			}
			for _, name := range tt.noMatch {
				if p.Match(name) {
					t.Errorf("%q matches %q, want none", name, tt.patterns)
				}
			}
			// An image matches when any of its names does.
			if len(tt.match) > 0 && len(tt.noMatch) > 0 && !p.Match(tt.noMatch[0], tt.match[0]) {
				t.Errorf("names %q, %q do not match %q, want a match (the second does)", tt.noMatch[0], tt.match[0], tt.patterns)
			}
		})
	}
}

// TestParseRefuses: patterns that could never match are refused with a reason, and every
// invalid one of a list is named.
func TestParseRefuses(t *testing.T) {
	tests := []struct {
		pattern string
		reason  string
	}{
		{"", "empty"},
		{"busybox:1.36", "docker.io/library/busybox:1.36"},
		{"registry.k8s.io/pause", "no tag and no digest"},
		{"registry.k8s.io/pause:3.10@" + digest, "both a tag and a digest"},
		{"registry.k8s.io/Pause:3.10", "not an image name"},
		{"*pause", "a * may only"},
		{"registry.k8s.io/*/pause:*", "a * may only"},
		{"*pa*use*", "a * may only"},
		{"registry.k8s.io/pa*use:3.10", "a * may only"},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			_, err := Parse([]string{"quay.io/*", tt.pattern})
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want an error", tt.pattern)
			}
			if !errors.Is(err, ErrInvalidPattern) || !strings.Contains(err.Error(), tt.reason) || !strings.Contains(err.Error(), `"`+tt.pattern+`"`) {
				t.Errorf("Parse(%q): %v; want ErrInvalidPattern naming the pattern and %q", tt.pattern, err, tt.reason)
			}
		})
	}
	_, err := Parse([]string{"a:1", "quay.io/*", "*b"})
	if err == nil || !strings.Contains(err.Error(), `"a:1"`) || !strings.Contains(err.Error(), `"*b"`) {
		t.Errorf("Parse of two invalid patterns: %v; want both named", err)
	}
}
