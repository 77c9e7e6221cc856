package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/mod/semver"
)

// TestReleaseFiles: VERSION (what `make build` stamps into crijournal --version) is a
// semantic version above the previous release's, releases/previous is "v<semver>
// <40-hex commit>", and CHANGELOG.md has a section for each.
func TestReleaseFiles(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile("../../" + path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	current := "v" + strings.TrimSpace(read("VERSION"))
	if !semver.IsValid(current) || semver.Canonical(current) != current {
		t.Fatalf("VERSION %q is not a semantic version MAJOR.MINOR.PATCH", current[1:])
	}
	prev := regexp.MustCompile(`^(v\S+) ([0-9a-f]{40})\n$`).FindStringSubmatch(read("releases/previous"))
	if prev == nil || !semver.IsValid(prev[1]) {
		t.Fatalf("releases/previous %q: want one line \"v<semver> <full commit>\"", read("releases/previous"))
	}
	if semver.Compare(prev[1], current) >= 0 {
		t.Errorf("the previous release %s is not below VERSION's %s", prev[1], current)
	}
	changelog := read("CHANGELOG.md")
	for _, v := range []string{current, prev[1]} {
		if !regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(v[1:]) + `\] - \d{4}-\d{2}-\d{2}$`).MatchString(changelog) {
			t.Errorf("CHANGELOG.md has no section \"## [%s] - <date>\"", v[1:])
		}
	}
}
