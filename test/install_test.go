package test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// installedFiles are what `make install` writes into an empty root with PREFIX=/usr/local.
var installedFiles = []string{
	"etc/cni/net.d/10-crijournal-bridge.conflist",
	"etc/containers/policy.json",
	"etc/crijournal/crijournal.toml",
	"usr/local/bin/crijournal",
	"usr/local/bin/crijournal-pause",
	"usr/local/bin/crijournal-pause-sleep",
	"usr/local/lib/systemd/system/crijournal.service",
	"usr/local/share/bash-completion/completions/crijournal",
	"usr/local/share/crijournal/crictl.yaml",
	"usr/local/share/crijournal/installed-files",
}

// makeIn runs make target in the repository with DESTDIR=root and the daemon under test as
// the binary to install.
func makeIn(t *testing.T, root, target string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make install test: make is not installed: %v", err)
	}
	cmd := exec.Command("make", "--no-print-directory", "-C", "..", target, "DESTDIR="+root, "PREFIX=/usr/local", "BIN="+daemonBinary(t), "PAUSE_BIN="+pauseBinary(daemonBinary(t)),
		"SLEEP_BIN="+pauseSleeper(daemonBinary(t)))
	cmd.Env = daemonEnv(nil)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s DESTDIR=%s: %v\n%s", target, root, err, out)
	}
	return string(out)
}

// filesUnder lists the regular files under root, relative and sorted.
func filesUnder(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestMakeInstall installs into a temporary root: the file list, a unit a node can run
// (KillMode=process, Delegate=yes, Restart=always, the installed binary), a configuration the
// daemon loads; a second install keeps an edited configuration; uninstall removes what
// install added, keeps the edited configuration and never touches the journal.
func TestMakeInstall(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	makeIn(t, root, "install")
	if got := filesUnder(t, root); !slices.Equal(got, installedFiles) {
		t.Fatalf("make install wrote\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(installedFiles, "\n  "))
	}

	unit := readText(t, filepath.Join(root, "usr/local/lib/systemd/system/crijournal.service"))
	for _, line := range []string{"ExecStart=/usr/local/bin/crijournal serve", "KillMode=process", "Delegate=yes", "Restart=always", "WantedBy=multi-user.target"} {
		if !slices.Contains(strings.Split(unit, "\n"), line) {
			t.Errorf("the installed unit has no line %q:\n%s", line, unit)
		}
	}
	conf := filepath.Join(root, "etc/crijournal/crijournal.toml")
	out, err := exec.Command(daemonBinary(t), "config", "--config", conf).CombinedOutput()
	if err != nil {
		t.Fatalf("the installed configuration does not load: %v\n%s", err, out)
	}
	for _, key := range []string{"signature_policy = '/etc/containers/policy.json'", "registries_conf = '/etc/containers/registries.conf'", "# "} {
		if !strings.Contains(readText(t, conf), key) {
			t.Errorf("the installed configuration lacks %q", key)
		}
	}
	if !strings.Contains(readText(t, filepath.Join(root, "usr/local/share/bash-completion/completions/crijournal")), "__start_crijournal") {
		t.Error("the installed bash completion is not cobra's completion of crijournal")
	}

	// The operator edits the configuration; the node has a journal.
	edited := readText(t, conf) + "\n# edited by the operator\n"
	writeFile(t, conf, edited, 0o644)
	journal := filepath.Join(root, "var/lib/crijournal/journal.db")
	if err := os.MkdirAll(filepath.Dir(journal), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, journal, "not really a journal", 0o600)

	makeIn(t, root, "install")
	if readText(t, conf) != edited {
		t.Error("a second make install replaced the edited configuration")
	}

	out2 := makeIn(t, root, "uninstall")
	want := []string{"etc/crijournal/crijournal.toml", "var/lib/crijournal/journal.db"}
	if got := filesUnder(t, root); !slices.Equal(got, want) {
		t.Errorf("after make uninstall the root holds\n  %s\nwant\n  %s\n%s", strings.Join(got, "\n  "), strings.Join(want, "\n  "), out2)
	}
	if !strings.Contains(out2, "kept /etc/crijournal/crijournal.toml") {
		t.Errorf("make uninstall does not say it kept the edited configuration:\n%s", out2)
	}
}

func readText(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
