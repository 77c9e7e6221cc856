package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/config"
)

// TestCheckRuntimeVersions: at start, a runc without the breakout fixes, or one that does
// not say its release, is warned of once, naming the handler, path, version, CVEs and the
// fix; refuse_vulnerable_runtime turns that into an error that stops the daemon. A fixed
// runc and a crun are not warned of, nor refused.
func TestCheckRuntimeVersions(t *testing.T) {
	for _, tt := range []struct {
		name       string
		output     string // of --version
		path       bool   // the handler has a path of its own
		refuse     bool
		wantWarn   bool
		wantRefuse bool
		wantFix    string
	}{
		{name: "Debian's runc from PATH", output: "runc version 1.1.5+ds1", wantWarn: true, wantFix: "make deps"},
		{name: "Debian's runc from PATH, refused", output: "runc version 1.1.5+ds1", refuse: true, wantWarn: true, wantRefuse: true, wantFix: "make deps"},
		{name: "a configured runc 1.3.2", output: "runc version 1.3.2", path: true, wantWarn: true, wantFix: "set runtimes.h.path to runc >= 1.2.8, 1.3.3"},
		{name: "runc 1.4.0-rc.2, refused", output: "runc version 1.4.0-rc.2", refuse: true, wantWarn: true, wantRefuse: true, wantFix: "1.4.0-rc.3"},
		{name: "no release, refused", output: "runc version unknown", refuse: true, wantWarn: true, wantRefuse: true, wantFix: "make deps"},
		{name: "runc 1.3.3", output: "runc version 1.3.3", refuse: true},
		{name: "runc 1.2.8", output: "runc version 1.2.8", refuse: true},
		{name: "crun", output: "crun version 1.8.1", refuse: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "cjv") // short: conmon's socket paths live under it
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			bin := filepath.Join(dir, "runtime")
			if err := os.WriteFile(bin, []byte("#!/bin/sh\necho '"+tt.output+"'\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := config.Default()
			cfg.RunRoot = dir
			cfg.ConmonPath = "/bin/true"
			cfg.RefuseVulnerableRuntime = tt.refuse
			cfg.DefaultRuntime = "h"
			// The runtimes run bin; the configuration checked gives the handler a path,
			// or none (the project's runc was missing and runc from PATH is bin).
			cfg.Runtimes = map[string]config.Runtime{"h": {Path: bin, Root: filepath.Join(dir, "root")}}
			runtimes := newRuntimeSet(cfg, 0)
			if !tt.path {
				cfg.Runtimes = map[string]config.Runtime{"h": {Root: filepath.Join(dir, "root")}}
			}
			var logs bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			err = checkRuntimeVersions(context.Background(), cfg, runtimes, log)
			if (err != nil) != tt.wantRefuse {
				t.Fatalf("checkRuntimeVersions = %v, want refused %v", err, tt.wantRefuse)
			}
			var warnings []map[string]any
			for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err == nil && rec["level"] == "WARN" {
					warnings = append(warnings, rec)
				}
			}
			if !tt.wantWarn {
				if len(warnings) > 0 {
					t.Errorf("warned: %v", warnings)
				}
				return
			}
			if len(warnings) != 1 {
				t.Fatalf("%d warnings, want 1:\n%s", len(warnings), logs.String())
			}
			w := warnings[0]
			cves, _ := w["cves"].([]any)
			fix, _ := w["fix"].(string)
			if w["handler"] != "h" || w["path"] != bin || !slices.Contains(cves, any("CVE-2025-31133")) || !strings.Contains(fix, tt.wantFix) {
				t.Errorf("warning %v, want handler h, path %s, the CVEs and a fix saying %q", w, bin, tt.wantFix)
			}
			if tt.wantRefuse && (!strings.Contains(err.Error(), "handler h") || !strings.Contains(err.Error(), "CVE-2025-52881")) {
				t.Errorf("refusal %q does not name the handler and the CVEs", err)
			}
		})
	}
}

// TestLogSizeMax: log_size_max = 0 bounds logs to 1 GiB only with a conmon that starts its
// count again at a reopen (2.1.10 and later), and says so once with an older one; a bound
// set is kept with any conmon, with a warning for an older one; a negative one is none.
func TestLogSizeMax(t *testing.T) {
	for _, tt := range []struct {
		name       string
		conmon     string // what conmon --version prints; "" fails
		configured int64
		want       int64
		wantLevel  string // of the one message logged; "" for none
	}{
		{"automatic, Debian 12's conmon", "conmon version 2.1.6\ncommit: unknown", 0, 0, "INFO"},
		{"automatic, conmon 2.1.9", "conmon version 2.1.9", 0, 0, "INFO"},
		{"automatic, conmon 2.1.10", "conmon version 2.1.10\ncommit: 1d5fc8a", 0, config.AutoLogSizeMax, ""},
		{"automatic, conmon 2.2.0", "conmon version 2.2.0", 0, config.AutoLogSizeMax, ""},
		{"automatic, conmon fails", "", 0, 0, "INFO"},
		{"set, Debian 12's conmon", "conmon version 2.1.6", 65536, 65536, "WARN"},
		{"set, conmon 2.1.12", "conmon version 2.1.12", 65536, 65536, ""},
		{"none", "conmon version 2.1.12", -1, 0, ""},
		{"none, Debian 12's conmon", "conmon version 2.1.6", -1, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conmon := filepath.Join(t.TempDir(), "conmon")
			script := "#!/bin/sh\nexit 1\n"
			if tt.conmon != "" {
				script = "#!/bin/sh\nprintf '%s\\n' '" + tt.conmon + "'\n"
			}
			if err := os.WriteFile(conmon, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := config.Default()
			cfg.ConmonPath, cfg.LogSizeMax = conmon, tt.configured
			var logs bytes.Buffer
			got := logSizeMax(context.Background(), cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
			if got != tt.want {
				t.Errorf("logSizeMax = %d, want %d", got, tt.want)
			}
			var levels []string
			for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
				var rec struct{ Level string }
				if json.Unmarshal([]byte(line), &rec) == nil {
					levels = append(levels, rec.Level)
				}
			}
			if want := slices.DeleteFunc([]string{tt.wantLevel}, func(s string) bool { return s == "" }); !slices.Equal(levels, want) {
				t.Errorf("logged %q, want %q:\n%s", levels, want, logs.String())
			}
		})
	}
}
