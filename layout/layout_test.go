package layout

import (
	"strings"
	"testing"
)

// TestNode: each path of a default-configured node and of one whose optional paths are
// set.
func TestNode(t *testing.T) {
	def := Node{Root: "/var/lib/crijournal", RunRoot: "/run/crijournal", Socket: "/run/crijournal/crijournal.sock",
		NamespaceDir: "/var/run/crijournal/ns", RuntimeRoots: map[string]string{"runc": "", "crun": "/run/crun-root"}}
	set := def
	set.JournalPath, set.StorageRoot, set.StorageRunRoot, set.CNICacheDir = "/j.db", "/s", "/sr", "/cni"
	for _, tc := range []struct{ name, got, want string }{
		{"JournalFile", def.JournalFile(), "/var/lib/crijournal/journal.db"},
		{"JournalFile set", set.JournalFile(), "/j.db"},
		{"StorageRootDir", def.StorageRootDir(), "/var/lib/crijournal/storage"},
		{"StorageRootDir set", set.StorageRootDir(), "/s"},
		{"StorageRunRootDir", def.StorageRunRootDir(), "/run/crijournal/storage"},
		{"StorageRunRootDir set", set.StorageRunRootDir(), "/sr"},
		{"UsernsRootfsDir", def.UsernsRootfsDir(), "/run/crijournal/storage/rootfs"},
		{"UsernsRootfsDir set", set.UsernsRootfsDir(), "/sr/rootfs"},
		{"ImageCacheDir", def.ImageCacheDir(), "/var/lib/crijournal/image-cache"},
		{"InspectSocket", def.InspectSocket(), "/run/crijournal/inspect.sock"},
		{"RuntimeRoot(runc)", def.RuntimeRoot("runc"), "/run/crijournal/runc"},
		{"RuntimeRoot(crun)", def.RuntimeRoot("crun"), "/run/crun-root"},
		{"RuntimeRoot(other)", def.RuntimeRoot("other"), "/run/crijournal/other"},
		{"Handlers", strings.Join(def.Handlers(), ","), "crun,runc"},
		{"ConmonState", def.ConmonState("runc").Dir(), "/run/crijournal/oci-runc"},
		{"ConmonState exits", def.ConmonState("runc").ExitsDir(), "/run/crijournal/oci-runc/exits"},
		{"ConmonState container", def.ConmonState("runc").Container("c1"), "/run/crijournal/oci-runc/containers/c1"},
		{"ConmonState attach", def.ConmonState("runc").AttachDir(), "/run/crijournal/oci-runc/attach"},
		{"PinDir", def.PinDir("net"), "/var/run/crijournal/ns/netns"},
		{"Pin", def.Pin("uts", "s1"), "/var/run/crijournal/ns/utsns/s1"},
		{"PodFilesDir", def.PodFilesDir(), "/run/crijournal/sandboxes"},
		{"PodDir", def.PodDir("s1"), "/run/crijournal/sandboxes/s1"},
		{"CNICache", def.CNICache(), "/var/lib/cni"},
		{"CNICache set", set.CNICache(), "/cni"},
		{"CNIResult", set.CNIResult("net1", "s1", "eth0"), "/cni/results/net1-s1-eth0"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestStateDirFor(t *testing.T) {
	long := "/tmp/a-run-root-long-enough-for-conmon-to-truncate-its-attach-socket-paths"
	for _, tc := range []struct {
		runRoot, handler string
		want             func(string) bool
	}{
		{"/run/crijournal", "runc", func(d string) bool { return d == "/run/crijournal/oci-runc" }},
		{long, "runc", func(d string) bool { return strings.HasPrefix(d, ShortStateDirPrefix) && len(d) <= MaxStateDirLen }},
	} {
		got := StateDirFor(tc.runRoot, tc.handler)
		if !tc.want(got) {
			t.Errorf("StateDirFor(%q, %q) = %q", tc.runRoot, tc.handler, got)
		}
	}
	// One directory per run root and handler, the same at every start.
	first, again := StateDirFor(long, "runc"), StateDirFor(long, "runc")
	if first != again || first == StateDirFor(long, "crun") || first == StateDirFor(long+"-2", "runc") {
		t.Error("the short directories of long run roots are not one per run root and handler")
	}
}
