package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/journal"
)

// run executes the root command with args and returns what it printed.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestVersionAndConfig(t *testing.T) {
	out, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "crijournal dev") {
		t.Fatalf("version = %q, %v", out, err)
	}
	cfgFile := filepath.Join(t.TempDir(), "c.toml")
	os.WriteFile(cfgFile, []byte("cache_ttl = \"7s\"\n"), 0o600)
	out, err = run(t, "config", "--config", cfgFile, "--log-level", "debug")
	if err != nil || !strings.Contains(out, "cache_ttl = '7s'") || !strings.Contains(out, "log_level = 'debug'") {
		t.Fatalf("config = %v:\n%s", err, out)
	}
	os.WriteFile(cfgFile, []byte("cache_tll = \"7s\"\n"), 0o600)
	if _, err := run(t, "config", "--config", cfgFile); err == nil || !strings.Contains(err.Error(), "cache_tll") {
		t.Fatalf("an unknown key was not named: %v", err)
	}
}

func TestInspectOffline(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := j.Begin(journal.BeginRequest{Kind: journal.KindSandbox, Name: "k8s_a_ns_u_0", Fingerprint: "f"})
	j.Intents(a.ID, journal.Intended{Stage: "sandbox network creation", Kind: "cni-attach", Args: map[string]string{"netns": "/run/x"}})
	b, _ := j.Begin(journal.BeginRequest{Kind: journal.KindContainer, Name: "k8s_c_a_ns_u_0", Fingerprint: "f"})
	j.Intents(b.ID, journal.Intended{Stage: "container storage creation", Kind: "storage-container"})
	j.Close()

	common := []string{"--config", filepath.Join(dir, "none.toml"), "--journal-path", path, "--socket", filepath.Join(dir, "cri.sock")}
	os.WriteFile(filepath.Join(dir, "none.toml"), nil, 0o600)
	tests := []struct {
		args []string
		want []string
		not  []string
	}{
		{args: []string{"inspect"}, want: []string{a.ID[:13], b.ID[:13], "sandbox network creation", "creating"}},
		{args: []string{"inspect", "--kind", "container"}, want: []string{b.ID[:13]}, not: []string{a.ID[:13]}},
		{args: []string{"inspect", "k8s_a_ns_u_0"}, want: []string{a.ID, "cni-attach", "/run/x", "intent"}},
		{args: []string{"inspect", "--json", "--state", "cached"}, want: []string{"[]"}},
		{args: []string{"inspect", "--check"}, want: []string{"journal OK"}},
	}
	for _, tt := range tests {
		out, err := run(t, append(tt.args, common...)...)
		if err != nil {
			t.Errorf("%v: %v", tt.args, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", tt.args, w, out)
			}
		}
		for _, n := range tt.not {
			if strings.Contains(out, n) {
				t.Errorf("%v: output has %q:\n%s", tt.args, n, out)
			}
		}
	}
	if _, err := run(t, append([]string{"inspect", "nosuchrecord"}, common...)...); err == nil {
		t.Error("inspect of an unknown record succeeded")
	}
}

// TestVersionFlagAndCompletion: --version prints what version prints, with a git
// revision line; cobra's completion command writes a bash completion.
func TestVersionFlagAndCompletion(t *testing.T) {
	flag, err := run(t, "--version")
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := run(t, "version")
	if err != nil || flag != cmd || !strings.Contains(flag, "\ngit revision ") {
		t.Fatalf("--version = %q, version = %q (%v): want the same text with a git revision", flag, cmd, err)
	}
	out, err := run(t, "completion", "bash")
	if err != nil || !strings.Contains(out, "__start_crijournal") {
		t.Fatalf("completion bash = %v:\n%.200s", err, out)
	}
}

// TestInspectLeaksAndPaths: inspect --leaks on a node of its own passes while it holds
// nothing, and fails naming a namespace pin no record owns, a record left creating while
// the daemon is down, and the pin in --json; --paths prints the node's paths.
func TestInspectLeaksAndPaths(t *testing.T) {
	dir := t.TempDir()
	// The default runc root is the node's /run/crijournal/runc, not this node's.
	os.WriteFile(filepath.Join(dir, "node.toml"), []byte("[runtimes.runc]\nroot = \""+filepath.Join(dir, "run", "runc")+"\"\n"), 0o600)
	common := []string{"--config", filepath.Join(dir, "node.toml"), "--root", filepath.Join(dir, "root"), "--run-root", filepath.Join(dir, "run"),
		"--socket", filepath.Join(dir, "run", "cri.sock"), "--namespace-dir", filepath.Join(dir, "ns"),
		"--cni-conf-dir", filepath.Join(dir, "net.d"), "--cni-cache-dir", filepath.Join(dir, "cni-cache")}
	args := func(a ...string) []string { return append(a, common...) }
	// cgroups: only below a parent no one uses.
	leakArgs := args("inspect", "--leaks", "--cgroup-parent", "/crijournal-cmd-test-none")

	out, err := run(t, leakArgs...)
	if err != nil || !strings.Contains(out, "no leaks") {
		t.Fatalf("a clean node: %v\n%s", err, out)
	}
	pin := filepath.Join(dir, "ns", "netns", strings.Repeat("a", 64))
	os.MkdirAll(filepath.Dir(pin), 0o755)
	os.WriteFile(pin, nil, 0o644)
	j, err := journal.Open(filepath.Join(dir, "root", "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := j.Begin(journal.BeginRequest{Kind: journal.KindSandbox, Name: "k8s_a_ns_u_0", Fingerprint: "f"})
	j.Close()
	out, err = run(t, leakArgs...)
	if err == nil || !strings.Contains(out, pin) || !strings.Contains(out, rec.ID) || !strings.Contains(out, "left creating") {
		t.Errorf("a pin no record owns and a record left creating: %v\n%s", err, out)
	}
	out, _ = run(t, append(leakArgs, "--json")...)
	var rep struct{ Leaks []struct{ Kind, What string } }
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Leaks) != 2 {
		t.Errorf("--json: %v, %+v\n%s", err, rep, out)
	}

	out, err = run(t, args("inspect", "--paths")...)
	var paths map[string]any
	if err != nil || json.Unmarshal([]byte(out), &paths) != nil || paths["pod_files"] != filepath.Join(dir, "run", "sandboxes") ||
		paths["journal"] != filepath.Join(dir, "root", "journal.db") {
		t.Errorf("--paths: %v\n%s", err, out)
	}
}
