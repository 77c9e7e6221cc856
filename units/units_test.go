package units

import (
	"errors"
	"testing"
)

func TestPath(t *testing.T) {
	for _, tc := range []struct {
		parent, prefix, id string
		want, dir          string
		unit               string
	}{
		{"kubepods-burstable-pod1.slice", Prefix, "c1", "kubepods-burstable-pod1.slice:crijournal:c1",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/crijournal-c1.scope", "crijournal-c1.scope"},
		// The slice's directory, as a kubelet with cgroupDriver: systemd sends it.
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice", Prefix, "c1", "kubepods-burstable-pod1.slice:crijournal:c1",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/crijournal-c1.scope", "crijournal-c1.scope"},
		{"", ConmonPrefix, "c2", "crijournal.slice:crijournal-conmon:c2", "/crijournal.slice/crijournal-conmon-c2.scope", "crijournal-conmon-c2.scope"},
	} {
		got, err := ScopePath(tc.parent, tc.prefix, tc.id)
		if err != nil || got != tc.want {
			t.Fatalf("ScopePath(%q, %q, %q) = %q, %v; want %q", tc.parent, tc.prefix, tc.id, got, err, tc.want)
		}
		if !IsPath(got) {
			t.Errorf("IsPath(%q) = false", got)
		}
		p, err := Parse(got)
		if err != nil {
			t.Fatal(err)
		}
		if dir, err := p.Dir(); err != nil || dir != tc.dir || p.Unit() != tc.unit || p.String() != got {
			t.Errorf("%q: dir %q (%v), unit %q, string %q; want %q, %q", got, dir, err, p.Unit(), p.String(), tc.dir, tc.unit)
		}
	}
	for _, bad := range []string{"/kubepods/pod1", "kubepods", "a/b.slice", "-bad.slice", ".slice",
		"/kubepods-pod1.slice", "/other.slice/kubepods-pod1.slice", "/kubepods.slice/kubepods-pod1.slice/", "/kubepods.slice/../kubepods-pod1.slice"} {
		if _, err := ScopePath(bad, Prefix, "c"); !errors.Is(err, ErrInvalid) {
			t.Errorf("ScopePath(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if IsPath("/kubepods/pod1/crijournal-c1") {
		t.Error("a cgroupfs path is taken for a systemd one")
	}
}

func TestParentSlice(t *testing.T) {
	for name, want := range map[string]string{
		"kubepods-burstable-pod1.slice": "kubepods-burstable.slice",
		"kubepods.slice":                "-.slice",
		"cje2ecj1-podab12.slice":        "cje2ecj1.slice",
	} {
		if got := ParentSlice(name); got != want {
			t.Errorf("ParentSlice(%q) = %q, want %q", name, got, want)
		}
	}
}
