package oci

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var breakoutCVEs = []string{"CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"}

const breakoutFix = "runc >= 1.2.8, 1.3.3 or 1.4.0-rc.3 (on its branch)"

// TestJudgeVersion: each branch of runc is judged against its own first fixed release
// (1.2.8, 1.3.3, 1.4.0-rc.3), older branches have no fix, newer ones have them all; a
// distribution's suffix is not taken for a prerelease; another runtime is not judged;
// output without a release number cannot be judged.
func TestJudgeVersion(t *testing.T) {
	vulnerable := func(version string) RuntimeVersion {
		return RuntimeVersion{Name: "runc", Version: version, Verdict: VerdictVulnerable, CVEs: breakoutCVEs, Fix: breakoutFix}
	}
	fixed := func(version string) RuntimeVersion {
		return RuntimeVersion{Name: "runc", Version: version, Verdict: VerdictFixed}
	}
	unknown := func(name, version string) RuntimeVersion {
		return RuntimeVersion{Name: name, Version: version, Verdict: VerdictUnknown, CVEs: breakoutCVEs, Fix: breakoutFix}
	}
	for _, tt := range []struct {
		name string
		out  string
		want RuntimeVersion
	}{
		{"1.0 release candidate", "runc version 1.0.0-rc95\ncommit: b9ee9c63\n", vulnerable("1.0.0-rc95")},
		{"1.1.0", "runc version 1.1.0\n", vulnerable("1.1.0")},
		{"Debian 12", "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\nspec: 1.0.2-dev\ngo: go1.19.8\nlibseccomp: 2.5.4\n", vulnerable("1.1.5+ds1")},
		{"1.1.15, last of 1.1", "runc version 1.1.15\n", vulnerable("1.1.15")},
		{"1.2.0-rc.1", "runc version 1.2.0-rc.1\n", vulnerable("1.2.0-rc.1")},
		{"1.2.0", "runc version 1.2.0\n", vulnerable("1.2.0")},
		{"1.2.7", "runc version 1.2.7\n", vulnerable("1.2.7")},
		{"1.2.8", "runc version 1.2.8\ncommit: v1.2.8-0-g3b5a5f8f\n", fixed("1.2.8")},
		{"1.2.9", "runc version 1.2.9\n", fixed("1.2.9")},
		{"1.3.0-rc.1", "runc version 1.3.0-rc.1\n", vulnerable("1.3.0-rc.1")},
		{"1.3.0", "runc version 1.3.0\n", vulnerable("1.3.0")},
		{"1.3.2", "runc version 1.3.2\n", vulnerable("1.3.2")},
		{"1.3.3", "runc version 1.3.3\n", fixed("1.3.3")},
		{"1.3.7, the project's", "runc version 1.3.7\ncommit: v1.3.7\nspec: 1.2.1\n", fixed("1.3.7")},
		{"Ubuntu's 1.3.3 is 1.3.3", "runc version 1.3.3-0ubuntu1~24.04.3\n", fixed("1.3.3-0ubuntu1~24.04.3")},
		{"Ubuntu's 1.1.12", "runc version 1.1.12-0ubuntu2~22.04.1\n", vulnerable("1.1.12-0ubuntu2~22.04.1")},
		{"1.4.0-rc.1", "runc version 1.4.0-rc.1\n", vulnerable("1.4.0-rc.1")},
		{"1.4.0-rc.2", "runc version 1.4.0-rc.2\n", vulnerable("1.4.0-rc.2")},
		{"1.4.0-rc.3", "runc version 1.4.0-rc.3\n", fixed("1.4.0-rc.3")},
		{"1.4.0-rc.10 is after rc.3", "runc version 1.4.0-rc.10\n", fixed("1.4.0-rc.10")},
		{"1.4.0", "runc version 1.4.0\n", fixed("1.4.0")},
		{"1.4.2", "runc version 1.4.2\n", fixed("1.4.2")},
		{"1.5.0-rc.1, a newer branch", "runc version 1.5.0-rc.1\n", fixed("1.5.0-rc.1")},
		{"2.0.0", "runc version 2.0.0\n", fixed("2.0.0")},
		{"a build without a version", "runc version unknown\ncommit: 3f2a1b\n", unknown("runc", "unknown")},
		{"garbage", "Usage: runtime [options]\n", unknown("", "")},
		{"no output", "", unknown("", "")},
		{"crun", "crun version 1.8.1\ncommit: f8a096be060b22ccd3d5f3ebe44108517fbf6c30\nrundir: /run/crun\nspec: 1.0.0\n+SYSTEMD +SELINUX +APPARMOR +CAP +SECCOMP +EBPF +YAJL\n",
			RuntimeVersion{Name: "crun", Version: "1.8.1", Verdict: VerdictNotRunc}},
		{"crun 1.1 is not runc 1.1", "crun version 1.1\n", RuntimeVersion{Name: "crun", Version: "1.1", Verdict: VerdictNotRunc}},
		{"youki", "youki version 0.3.3\n", RuntimeVersion{Name: "youki", Version: "0.3.3", Verdict: VerdictNotRunc}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Path = "/bin/rt"
			got := judgeVersion("/bin/rt", []byte(tt.out))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("judgeVersion(%q) (-want +got):\n%s", tt.out, diff)
			}
		})
	}
}

// TestFixTextNeedsEveryAdvisory: with two advisories, a branch is named only when it has
// the fixes of both, at the later of their first fixed releases.
func TestFixTextNeedsEveryAdvisory(t *testing.T) {
	as := []runcAdvisory{
		{cves: []string{"A"}, fixed: []string{"v1.2.8", "v1.3.3", "v1.4.0-rc.3"}},
		{cves: []string{"B"}, fixed: []string{"v1.3.6", "v1.4.3"}},
	}
	if got, want := fixText(as), "runc >= 1.3.6 or 1.4.3 (on its branch)"; got != want {
		t.Errorf("fixText = %q, want %q", got, want)
	}
	if got, want := fixText(as[:1]), breakoutFix; got != want {
		t.Errorf("fixText of one = %q, want %q", got, want)
	}
}

// TestRuntimeVersion runs a runtime binary's --version; one that fails gives an error
// and VerdictUnknown.
func TestRuntimeVersion(t *testing.T) {
	for _, tt := range []struct {
		name    string
		script  string
		want    Verdict
		wantErr bool
	}{
		{"fixed", `[ "$1" = --version ] && echo 'runc version 1.3.3'`, VerdictFixed, false},
		{"vulnerable", `[ "$1" = --version ] && echo 'runc version 1.1.5+ds1'`, VerdictVulnerable, false},
		{"fails", `echo 'no such flag' >&2; exit 1`, VerdictUnknown, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := shortTempDir(t)
			bin := filepath.Join(dir, "runtime")
			if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+tt.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			r, err := New(Config{Handler: "h", Path: bin, ConmonPath: "/bin/true", Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "s")})
			if err != nil {
				t.Fatal(err)
			}
			v, err := r.Version(context.Background())
			if (err != nil) != tt.wantErr {
				t.Fatalf("Version error %v, want error %v", err, tt.wantErr)
			}
			if v.Verdict != tt.want || v.Path != bin {
				t.Errorf("Version = %+v, want verdict %s for %s", v, tt.want, bin)
			}
		})
	}
}

// TestConmonLogCount: conmon 2.1.10 and later start their count of --log-size-max again
// at a reopen; older ones, and output without a conmon version, do not.
func TestConmonLogCount(t *testing.T) {
	for _, tt := range []struct {
		out     string
		version string
		resets  bool
	}{
		{"conmon version 2.1.6\ncommit: unknown\n", "2.1.6", false},
		{"conmon version 2.1.9\n", "2.1.9", false},
		{"conmon version 2.1.10\ncommit: 1d5fc8a\n", "2.1.10", true},
		{"conmon version 2.1.13-dev\n", "2.1.13-dev", true},
		{"conmon version 2.2.0\n", "2.2.0", true},
		{"conmon version 10.0.0\n", "10.0.0", true},
		{"conmon version unknown\n", "unknown", false},
		{"runc version 1.3.3\n", "", false},
		{"", "", false},
	} {
		version, resets := conmonLogCount([]byte(tt.out))
		if version != tt.version || resets != tt.resets {
			t.Errorf("conmonLogCount(%q) = %q, %v; want %q, %v", tt.out, version, resets, tt.version, tt.resets)
		}
	}
}
