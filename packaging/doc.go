// Package packaging is the release's packaging, not Go code: nfpm.yaml and scripts/ make
// the .deb and .rpm of `make release` (release.sh). Its test (packages_test.go) builds
// both packages at two versions and installs, upgrades, edits, removes and purges them in
// an overlay root the host never sees (test-packages.sh).
package packaging
