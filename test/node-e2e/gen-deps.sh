#!/usr/bin/env bash
# gen-deps.sh — regenerate test/kubelet/e2e_node_deps.go: the non-standard imports of
# k8s.io/kubernetes/test/e2e_node and of its test files (issue 23). `go test -c` of a package
# of a dependency module needs its test imports in the build list, and go mod tidy only keeps
# them when a file of the main module imports them. Run after changing the Kubernetes version
# in test/kubelet/go.mod, then `go mod tidy` there.
set -euo pipefail
cd "$(dirname "$0")/../kubelet"
pkg=k8s.io/kubernetes/test/e2e_node
imports=$(GOFLAGS=-mod=mod go list -e -f '{{join .Imports "\n"}}
{{join .TestImports "\n"}}
{{join .XTestImports "\n"}}' "$pkg" | awk -F/ '$1 ~ /\./' | grep -vx "$pkg" | LC_ALL=C sort -u)
{
	cat <<'HDR'
//go:build tools

// The kubelet's node end-to-end suite (k8s.io/kubernetes/test/e2e_node, issue 23) is a test
// binary built from a dependency: `go test -c` of a package outside the main module needs its
// test files' imports in the build list, which go mod tidy only tracks for packages it sees
// imported. This file, never built (tag tools), names them; test/node-e2e/gen-deps.sh
// regenerates it after a move to another Kubernetes release.
package kubelet

import (
	_ "k8s.io/kubernetes/test/e2e_node"
HDR
	sed 's/.*/\t_ "&"/' <<<"$imports"
	echo ')'
} >e2e_node_deps.go
gofmt -w e2e_node_deps.go
go mod tidy
