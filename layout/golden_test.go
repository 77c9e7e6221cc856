package layout

import (
	"fmt"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestLayoutGolden pins every path of the node's state directories, as Node derives them
// from a configuration, in testdata/golden/node-*.txt: a daemon that restarts, or a later
// release that upgrades it, finds its journal, storage, conmon state, pins and pods'
// files where these say. Changing one (-update) moves state an earlier release left:
// that needs a migration (or a fallback to the old path), and a CHANGELOG entry.
func TestLayoutGolden(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	def := Node{Root: "/var/lib/crijournal", RunRoot: "/run/crijournal", Socket: "/run/crijournal/crijournal.sock",
		NamespaceDir: "/var/run/crijournal/ns", RuntimeRoots: map[string]string{"runc": "", "crun": "/run/crun-root"}}
	set := def
	set.JournalPath, set.StorageRoot, set.StorageRunRoot, set.CNICacheDir = "/j/journal.db", "/s/storage", "/s/run", "/c/cni"
	long := def
	long.RunRoot = "/run/" + strings.Repeat("a-very-long-run-root/", 3)
	for name, n := range map[string]Node{"default": def, "set": set, "long-run-root": long} {
		t.Run(name, func(t *testing.T) {
			var b strings.Builder
			line := func(what, path string) { fmt.Fprintf(&b, "%-28s %s\n", what, path) }
			line("JournalFile", n.JournalFile())
			line("StorageRootDir", n.StorageRootDir())
			line("StorageRunRootDir", n.StorageRunRootDir())
			line("UsernsRootfsDir", n.UsernsRootfsDir())
			line("ImageCacheDir", n.ImageCacheDir())
			line("InspectSocket", n.InspectSocket())
			for _, h := range n.Handlers() {
				s := n.ConmonState(h)
				line("RuntimeRoot("+h+")", n.RuntimeRoot(h))
				line("ConmonState("+h+")", s.Dir())
				line("  Container(id)", s.Container(id))
				line("  ExitsDir", s.ExitsDir())
				line("  AttachDir", s.AttachDir())
			}
			for _, kind := range NamespaceKinds {
				line("Pin("+kind+", id)", n.Pin(kind, id))
			}
			line("PodDir(id)", n.PodDir(id))
			line("CNIResult(net, id, eth0)", n.CNIResult("net", id, "eth0"))
			line("DefaultHostLocalDataDir", DefaultHostLocalDataDir)
			testenv.Golden(t, "testdata/golden/node-"+name+".txt", []byte(b.String()))
		})
	}
}
