package oci

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

// Verdict is what a runtime's version says about runc's known container breakouts.
type Verdict string

// Verdicts of [RuntimeVersion].
const (
	// VerdictFixed: the runtime is a runc release that has every fix of runcAdvisories.
	VerdictFixed Verdict = "fixed"
	// VerdictVulnerable: the runtime is a runc release older than a fix on its branch
	// (or of a branch that never got one, such as 1.1). A distribution's build may carry
	// the fixes as patches under the old number; only its changelog can tell.
	VerdictVulnerable Verdict = "vulnerable"
	// VerdictUnknown: the runtime did not say which runc release it is (no answer to
	// --version, or an answer without a release number).
	VerdictUnknown Verdict = "unknown"
	// VerdictNotRunc: the runtime says it is not runc (crun, youki, ...): runc's release
	// numbers say nothing about it, and it is not judged. runc's advisory of November
	// 2025 says crun and youki had similar flaws; their own advisories tell which of
	// their releases fix them.
	VerdictNotRunc Verdict = "not-runc"
)

// A runcAdvisory is a set of runc vulnerabilities fixed by the same releases.
type runcAdvisory struct {
	cves []string
	// fixed is the first release that has the fixes on each branch that got them, in
	// ascending order. A release of an older branch, or of a branch between two of
	// these, has none; one of a newer branch has them all.
	fixed []string
}

// runcAdvisories are the runc vulnerabilities a node must not run with: container
// breakouts through procfs writes (GHSA-9493-h29p-rfm2, GHSA-qw9x-cqr3-wc7r,
// GHSA-cgrx-mc8f-2prm), fixed in runc 1.2.8, 1.3.3 and 1.4.0-rc.3; the 1.1 branch
// (Debian 12's runc 1.1.5) has no fix.
var runcAdvisories = []runcAdvisory{
	{
		cves:  []string{"CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881"},
		fixed: []string{"v1.2.8", "v1.3.3", "v1.4.0-rc.3"},
	},
}

// RuntimeVersion is what a runtime binary says it is (`<runtime> --version`), judged
// against runcAdvisories.
type RuntimeVersion struct {
	// Path is the runtime binary.
	Path string `json:"path"`
	// Name is the runtime's name as it gives it ("runc", "crun"); "" when it gave none.
	Name string `json:"name,omitempty"`
	// Version is the version it gives, as given ("1.1.5+ds1").
	Version string `json:"version,omitempty"`
	// Verdict is what the version says about runcAdvisories.
	Verdict Verdict `json:"verdict"`
	// CVEs are the vulnerabilities whose fixes the runtime lacks (VerdictVulnerable), or
	// cannot be shown to have (VerdictUnknown).
	CVEs []string `json:"cves,omitempty"`
	// Fix names the runc releases that have the fixes of CVEs, such as "runc >= 1.2.8,
	// 1.3.3 or 1.4.0-rc.3 (on its branch)".
	Fix string `json:"fix,omitempty"`
}

// versionTimeout bounds `<runtime> --version`.
const versionTimeout = 10 * time.Second

// Version asks the runtime binary its version (`<runtime> --version`) and judges it
// (see [Verdict]). It runs the binary on every call, so that an upgrade of the runtime
// under a running daemon shows; nothing that is polled should call it. A binary that
// cannot be run gives an error, with VerdictUnknown.
func (r *Runtime) Version(ctx context.Context) (RuntimeVersion, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.path, "--version")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		v := judgeVersion(r.path, nil)
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return v, fmt.Errorf("%s --version: %s", r.path, msg)
	}
	return judgeVersion(r.path, out), nil
}

var (
	// versionLine is the first line of `runc --version` ("runc version 1.1.5+ds1") and
	// of crun's, youki's and runsc's.
	versionLine = regexp.MustCompile(`^(\S+) version (\S+)`)
	// runcRelease is the release number at the start of runc's version: X.Y.Z and, for
	// a release candidate, -rc.N (-rcN before 1.1). What follows (+ds1, a distribution's
	// -0ubuntu1) is not runc's and is left out: "1.3.3-0ubuntu1" is the release 1.3.3,
	// not a prerelease of it.
	runcRelease = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(?:-rc\.?(\d+))?`)
	// releaseNumber is X.Y.Z at the start of a version.
	releaseNumber = regexp.MustCompile(`^\d+\.\d+\.\d+`)
)

// judgeVersion reads the output of `<path> --version` (nil: none) and judges it.
func judgeVersion(path string, out []byte) RuntimeVersion {
	v := RuntimeVersion{Path: path, Verdict: VerdictUnknown}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if m := versionLine.FindStringSubmatch(strings.TrimSpace(first)); m != nil {
		v.Name, v.Version = m[1], m[2]
	}
	if v.Name != "" && v.Name != "runc" {
		v.Verdict = VerdictNotRunc
		return v
	}
	release, ok := runcSemver(v.Version)
	if !ok {
		for _, a := range runcAdvisories {
			v.CVEs = append(v.CVEs, a.cves...)
		}
		v.Fix = fixText(runcAdvisories)
		return v
	}
	v.Verdict = VerdictFixed
	var lacking []runcAdvisory
	for _, a := range runcAdvisories {
		if !a.fixedIn(release) {
			lacking = append(lacking, a)
			v.CVEs = append(v.CVEs, a.cves...)
		}
	}
	if len(lacking) > 0 {
		v.Verdict, v.Fix = VerdictVulnerable, fixText(lacking)
	}
	return v
}

// runcSemver returns the runc release at the start of version as a semantic version
// ("v1.4.0-rc.3"), or false when version does not start with one.
func runcSemver(version string) (string, bool) {
	m := runcRelease.FindStringSubmatch(version)
	if m == nil {
		return "", false
	}
	s := fmt.Sprintf("v%s.%s.%s", m[1], m[2], m[3])
	if m[4] != "" {
		s += "-rc." + m[4]
	}
	return s, semver.IsValid(s)
}

// fixedIn reports whether the runc release v (a valid semantic version) has a's fixes.
func (a runcAdvisory) fixedIn(v string) bool {
	branch := semver.MajorMinor(v)
	for _, f := range a.fixed {
		if semver.MajorMinor(f) == branch {
			return semver.Compare(v, f) >= 0
		}
	}
	newest := semver.MajorMinor(a.fixed[len(a.fixed)-1])
	return semver.Compare(branch, newest) > 0
}

// fixText names the runc releases that have the fixes of every advisory of as: on each
// branch that has them all, the first such release.
func fixText(as []runcAdvisory) string {
	var branches []string
	for _, a := range as {
		for _, f := range a.fixed {
			if b := semver.MajorMinor(f); !slices.Contains(branches, b) {
				branches = append(branches, b)
			}
		}
	}
	semver.Sort(branches)
	var releases []string
	for _, b := range branches {
		if first, ok := firstFixed(as, b); ok {
			releases = append(releases, strings.TrimPrefix(first, "v"))
		}
	}
	switch len(releases) {
	case 0:
		return ""
	case 1:
		return "runc >= " + releases[0]
	}
	return "runc >= " + strings.Join(releases[:len(releases)-1], ", ") + " or " + releases[len(releases)-1] + " (on its branch)"
}

// firstFixed returns the first release of branch that has the fixes of every advisory
// of as, or false when no release of it has.
func firstFixed(as []runcAdvisory, branch string) (string, bool) {
	first := branch + ".0-0" // the lowest version of the branch
	for _, a := range as {
		i := slices.IndexFunc(a.fixed, func(f string) bool { return semver.MajorMinor(f) == branch })
		switch {
		case i >= 0 && semver.Compare(a.fixed[i], first) > 0:
			first = a.fixed[i]
		case i < 0 && !a.fixedIn(first):
			return "", false // a branch that never got a's fixes
		}
	}
	return first, true
}

// conmonLogCountReset is the first conmon release that starts its count of
// --log-size-max again when the log is reopened (the kubelet's rotation); older ones
// count all a container ever wrote.
const conmonLogCountReset = "v2.1.10"

// ConmonResetsLogCount asks conmon (path; "" looks it up in PATH) its version and
// reports whether it starts its count of --log-size-max again when a log is reopened.
// A conmon that cannot say is taken for one that does not.
func ConmonResetsLogCount(ctx context.Context, path string) (version string, resets bool, err error) {
	path, err = findBinary(path, "conmon")
	if err != nil {
		return "", false, err
	}
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		return "", false, fmt.Errorf("%s --version: %w", path, err)
	}
	version, resets = conmonLogCount(out)
	return version, resets, nil
}

// conmonLogCount reads the output of `conmon --version` ("conmon version 2.1.6"): the
// version it gives, and whether that release resets its log count at a reopen.
func conmonLogCount(out []byte) (version string, resets bool) {
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	m := versionLine.FindStringSubmatch(strings.TrimSpace(first))
	if m == nil || m[1] != "conmon" {
		return "", false
	}
	release := releaseNumber.FindString(m[2])
	return m[2], release != "" && semver.Compare("v"+release, conmonLogCountReset) >= 0
}
