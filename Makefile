# crijournal: build, test, run. Works from a fresh clone on Debian, as root,
# with Go in /usr/local/go. `make help` lists the targets.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

# Go and the tools it installs, whatever PATH make was started with.
# ($(shell) of GNU make 4.3 does not see exported variables: pass PATH.)
export PATH := /usr/local/go/bin:$(PATH)
GOPATH_BIN := $(shell PATH='$(PATH)' go env GOPATH 2>/dev/null)/bin
# Where deps and lint install crictl and staticcheck.
TOOLS_BIN ?= /usr/local/bin
export PATH := $(PATH):$(GOPATH_BIN):$(TOOLS_BIN)

# Build tags for containers/storage and containers/image: no gpgme, no btrfs headers.
GOTAGS := containers_image_openpgp,exclude_graphdriver_btrfs,nri_no_wasm
export CGO_ENABLED := 1

# The release (semantic version) is the VERSION file's; the revision is the git commit the
# binary was built from (-dirty for a modified tree). No git tag is read: a tree without
# tags names its release (releases/ names the previous one, CHANGELOG.md says what each brought).
VERSION ?= $(shell cat VERSION 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
LDFLAGS := -X main.version=$(VERSION) -X main.revision=$(REVISION)
BIN := bin/crijournal
# The pause program of shared pid namespaces, which the daemon looks for beside its own
# binary. Built without cgo: it drops its privileges on every thread (see internal/pause).
PAUSE_BIN := bin/crijournal-pause
# The sleeper the pause program becomes once confined (cmd/crijournal-pause-sleep, see
# internal/pause): a static C program of a few hundred KiB of memory, where the Go program
# keeps a few MiB. Installed beside the pause program; without it the Go program stays.
SLEEP_BIN := bin/crijournal-pause-sleep
SLEEP_CFLAGS := -static -Os -s -Wall -Wextra -Werror
# The benchmark program (contrib/bench, docs/BENCHMARKS.md): a binary of its own, so that the
# daemon does not link gonum/plot and the progress bar (lint checks it). Not installed.
BENCH_BIN := bin/crijournal-bench
# Packages the daemon's binary must not link.
DAEMON_FORBIDDEN_DEPS := gonum.org/|github.com/schollz/progressbar|github.com/crijournal/crijournal/bench$$
# End-to-end tests run this binary.
export CRIJOURNAL_BIN := $(abspath $(BIN))
# The real kubelet (Kubernetes v1.37.2, from the nested module test/kubelet) that the
# kubelet end-to-end tests drive the daemon with; `make kubelet` builds it.
KUBELET_BIN := bin/kubelet
KUBELET_SRC := test/kubelet/go.mod test/kubelet/go.sum $(wildcard test/kubelet/*.go)
export CRIJOURNAL_KUBELET := $(abspath $(KUBELET_BIN))
# The kubelet's node end-to-end suite (issue 23; `make node-e2e`, opt-in, test/node-e2e/):
# the test binary of k8s.io/kubernetes/test/e2e_node (etcd and the kube-apiserver run inside
# it) and the agnhost and nonewprivs programs of its stand-in images, all from test/kubelet.
NODE_E2E_BIN := bin/e2e_node.test
AGNHOST_BIN := bin/agnhost
NONEWPRIVS_BIN := bin/nonewprivs
GINKGO_BIN := bin/ginkgo
# The density suites' cAdvisor stand-in (issue 52): test/kit/cadvisor, a module of its own
# (cAdvisor v0.61.0's container manager, which the kubelet's module must not be moved to).
CADVISOR_BIN := bin/cadvisor
CADVISOR_SRC := test/kit/cadvisor/go.mod test/kit/cadvisor/go.sum $(wildcard test/kit/cadvisor/*.go)
# Extra arguments of test/node-e2e/run.sh: make node-e2e NODE_E2E_ARGS='--focus "Pods.*should get a host IP"'
NODE_E2E_ARGS ?=

# Debian packages the daemon and its tests run (gcc and libc6-dev for cgo, -race and the
# static $(SLEEP_BIN)).
# (libseccomp-dev and pkg-config build the project's runc; apparmor's apparmor_parser loads
# the default AppArmor profile on nodes that have AppArmor, and compiles it in the tests; systemd
# and dbus are booted in namespaces of their own by the systemd cgroup driver's tests, test/systemd;
# runc runs criu for CheckpointContainer; rpm installs the release's .rpm in packaging's test.)
DEB_PACKAGES := runc conmon containernetworking-plugins iproute2 util-linux iptables gcc libc6-dev busybox-static \
	libseccomp-dev pkg-config apparmor systemd dbus criu rpm
CRICTL_VERSION := v1.37.0
# The project's runc: built by deps from its Go module (Debian's runc 1.1 has no idmapped
# mounts, which user namespaces need). The daemon's handlers without a path use it when it
# is there (config: runtimes.<handler>.path); RUNC_PATH must match config.BundledRunc.
RUNC_VERSION := v1.3.7
RUNC_PATH := /usr/local/libexec/crijournal/runc
STATICCHECK_VERSION := v0.8.2
# The benchmarks' anchor (issue 42, contrib/bench/containerd.sh): containerd 2.x built from
# its Go module, beside Debian's containerd 1.6.
CONTAINERD2_VERSION := v2.4.2
CONTAINERD2_DIR := /usr/local/libexec/crijournal/containerd-$(CONTAINERD2_VERSION:v%=%)

CNI_CONF_DIR := /etc/cni/net.d
CNI_BRIDGE := contrib/cni/10-crijournal-bridge.conflist
# Extra arguments of `make run`, such as RUN_ARGS='--log-level=debug'.
RUN_ARGS ?=

# Where `make install` puts things (DESTDIR is prepended to every path, for packaging).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
SYSTEMDDIR ?= $(PREFIX)/lib/systemd/system
SHAREDIR ?= $(PREFIX)/share/crijournal
COMPLETIONDIR ?= $(PREFIX)/share/bash-completion/completions
DESTDIR ?=
# What install wrote, with checksums: uninstall removes exactly these files, and only
# those still as installed.
MANIFEST := $(SHAREDIR)/installed-files
POLICY := contrib/containers/policy.json

# Where `make release` puts the tarball, the packages and their checksums (packaging/release.sh).
DIST := dist

# Fuzz targets (package:Target) that `make test` runs for FUZZTIME each, from their seed
# corpus in the package's testdata/fuzz. A longer run: make fuzz FUZZTIME=10m.
FUZZ_TARGETS := ./server:FuzzRunPodSandboxConfig ./server:FuzzCreateContainerConfig \
	./server:FuzzDecodeRecordObject ./journal:FuzzDecodeRecord
FUZZTIME ?= 3s

.PHONY: help deps bench-deps build release kubelet node-e2e node-e2e-build test test-vm test-powerloss fuzz run lint bench clean install uninstall

# The previous release that test-upgrade starts from: releases/previous ("v<semver> <commit>"),
# built once with its own Makefile into bin/prev/<commit>/ (the daemon, its pause program and
# sleeper), from a git worktree that is removed again.
PREV_RELEASE := $(shell awk 'NF == 2 && $$1 ~ /^v[0-9]/ {print; exit}' releases/previous 2>/dev/null)
PREV_VERSION := $(or $(word 1,$(PREV_RELEASE)),v0.1.0)
PREV_COMMIT := $(or $(word 2,$(PREV_RELEASE)),efb8895)
.PHONY: test-upgrade

help:
	@echo 'make deps   install the Debian packages, crictl and the project runc the daemon and tests need'
	@echo 'make bench-deps  what contrib/bench/containerd.sh needs: Debian'"'"'s containerd 1.6, jq, and containerd $(CONTAINERD2_VERSION) built into $(CONTAINERD2_DIR)'
	@echo 'make build  build $(BIN), $(PAUSE_BIN), $(SLEEP_BIN) and $(BENCH_BIN)'
	@echo 'make kubelet  build $(KUBELET_BIN), the kubelet of the end-to-end tests (only when test/kubelet changed)'
	@echo 'make node-e2e  opt-in, as root, most of an hour: the kubelet node conformance suite against the daemon (test/node-e2e)'
	@echo 'make node-e2e-build  build $(NODE_E2E_BIN), $(AGNHOST_BIN), $(NONEWPRIVS_BIN), $(GINKGO_BIN) (only when test/kubelet changed), $(CADVISOR_BIN)'
	@echo 'make node-e2e-density  opt-in, as root, hours: the Density and Resource-usage specs (ONLY=regex narrows them; RUNTIME=containerd)'
	@echo 'make critest  opt-in, as root, ~4 min (the first run builds bin/critest): the CRI conformance suite (critest $(CRITEST_VERSION), NRI on) against $(BIN) with the stand-in images of test/kit; prints passed / failed / skipped'
	@echo 'make test   deps, build, kubelet, go vet, then every test with -race, the fuzz targets and test-upgrade (as root)'
	@echo 'make test-upgrade  as root, a few minutes: $(PREV_VERSION) ($(PREV_COMMIT)) builds state, this build takes it over (test/upgrade)'
	@echo 'make test-vm  opt-in, as root, ~30 min: the cgroup v2 + AppArmor tests in the emulated VM of test/vm'
	@echo 'make test-powerloss  opt-in, as root, 1-2 h: CUTS (30) power cuts of the emulated VM during a kubelet workload (test/vm/powerloss.sh)'
	@echo 'make fuzz   every fuzz target for FUZZTIME (default 3s; make fuzz FUZZTIME=10m)'
	@echo 'make run    deps, build, a default CNI bridge if none, then serve (as root)'
	@echo 'make install    install $(BIN), the systemd unit and defaults (PREFIX, DESTDIR; after make build)'
	@echo 'make uninstall  remove what install added (never the journal or the storage)'
	@echo 'make release  build, then $(DIST)/: the tarball, .deb and .rpm of VERSION ($(VERSION)) with SHA256SUMS (packaging/)'
	@echo 'make lint   gofmt, go vet, staticcheck; the daemon links no benchmark package, creation no CRI type'
	@echo 'make bench  every benchmark, 5 times'
	@echo 'make clean  remove build and test outputs'

# Quiet and offline when everything is there already.
deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "deps: installing$$missing"; \
		apt-get update -qq; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@have="$$(crictl --version 2>/dev/null || true)"; \
	if [ "$$have" != "crictl version $(CRICTL_VERSION)" ]; then \
		echo "deps: installing crictl $(CRICTL_VERSION) in $(TOOLS_BIN) (found: $${have:-none})"; \
		GOBIN=$(TOOLS_BIN) go install -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=$(CRICTL_VERSION)" \
			sigs.k8s.io/cri-tools/cmd/crictl@$(CRICTL_VERSION); \
		if [ "$$(command -v crictl)" != "$(TOOLS_BIN)/crictl" ]; then \
			echo "deps: warning: $$(command -v crictl) comes first in PATH, not $(TOOLS_BIN)/crictl"; \
		fi; \
	fi

	@have="$$($(RUNC_PATH) --version 2>/dev/null | head -n 1 || true)"; \
	if [ "$$have" != "runc version $(RUNC_VERSION:v%=%)" ]; then \
		echo "deps: building runc $(RUNC_VERSION) into $(RUNC_PATH) (found: $${have:-none})"; \
		tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
		GOBIN="$$tmp" go install -trimpath -tags seccomp -ldflags "-X main.gitCommit=$(RUNC_VERSION)" \
			github.com/opencontainers/runc@$(RUNC_VERSION); \
		install -d -m 0755 $(dir $(RUNC_PATH)); \
		install -m 0755 "$$tmp/runc" $(RUNC_PATH).new; \
		mv -f $(RUNC_PATH).new $(RUNC_PATH); \
	fi

# containerd 2.x with its shim and ctr, as the issue asks for it: `go install -tags
# no_btrfs` of its commands (not the release's static build); quiet when it is there.
bench-deps: deps
	@$(MAKE) --no-print-directory deps DEB_PACKAGES='containerd jq'
	@have="$$($(CONTAINERD2_DIR)/containerd --version 2>/dev/null | awk '{sub(/\+.*/, "", $$3); print $$3}' || true)"; \
	if [ "$$have" != "$(CONTAINERD2_VERSION:v%=%)" ] || [ ! -x $(CONTAINERD2_DIR)/containerd-shim-runc-v2 ] || [ ! -x $(CONTAINERD2_DIR)/ctr ]; then \
		echo "bench-deps: building containerd $(CONTAINERD2_VERSION) into $(CONTAINERD2_DIR) (found: $${have:-none})"; \
		tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
		for c in containerd containerd-shim-runc-v2 ctr; do \
			GOBIN="$$tmp" go install -tags no_btrfs github.com/containerd/containerd/v2/cmd/$$c@$(CONTAINERD2_VERSION) || exit 1; \
		done; \
		install -d -m 0755 $(CONTAINERD2_DIR); \
		for c in containerd containerd-shim-runc-v2 ctr; do install -m 0755 "$$tmp/$$c" $(CONTAINERD2_DIR)/$$c; done; \
	fi

build:
	go build -tags '$(GOTAGS)' -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/crijournal
	CGO_ENABLED=0 go build -trimpath -o $(PAUSE_BIN) ./cmd/crijournal-pause
	$(CC) $(SLEEP_CFLAGS) -o $(SLEEP_BIN) cmd/crijournal-pause-sleep/sleep.c
	go build -tags '$(GOTAGS)' -o $(BENCH_BIN) ./cmd/crijournal-bench

# The release of VERSION (packaging/release.sh): the tarball, the .deb and the .rpm (nfpm,
# pinned in tools/go.mod) with SHA256SUMS, in $(DIST). Needs only what build needs and the
# Go module proxy. CHANGELOG.md says what each release brought.
release: build
	packaging/release.sh $(VERSION) $(DIST)

# The kubelet takes minutes to build cold: rebuilt only when its module changed.
kubelet: $(KUBELET_BIN)

$(KUBELET_BIN): $(KUBELET_SRC)
	@mkdir -p $(dir $@)
	cd test/kubelet && v="$$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" && \
		go build -ldflags "-X k8s.io/component-base/version.gitVersion=$$v" \
			-o $(abspath $@) k8s.io/kubernetes/cmd/kubelet
	@touch $@

# The node e2e suite's binaries: like the kubelet, rebuilt only when test/kubelet changed.
# agnhost and nonewprivs go into the stand-in images: static, without cgo.
node-e2e-build: $(KUBELET_BIN) $(NODE_E2E_BIN) $(AGNHOST_BIN) $(NONEWPRIVS_BIN) $(GINKGO_BIN) $(CADVISOR_BIN)

$(NODE_E2E_BIN): $(KUBELET_SRC)
	@mkdir -p $(dir $@)
	cd test/kubelet && v="$$(go list -m -f '{{.Version}}' k8s.io/kubernetes)" && \
		go test -c -vet=off -ldflags "-X k8s.io/component-base/version.gitVersion=$$v" \
			-o $(abspath $@) k8s.io/kubernetes/test/e2e_node
	@touch $@

$(AGNHOST_BIN): $(KUBELET_SRC)
	@mkdir -p $(dir $@)
	cd test/kubelet && CGO_ENABLED=0 go build -o $(abspath $@) k8s.io/kubernetes/test/images/agnhost
	@touch $@

$(NONEWPRIVS_BIN): $(KUBELET_SRC)
	@mkdir -p $(dir $@)
	cd test/kubelet && CGO_ENABLED=0 go build -o $(abspath $@) k8s.io/kubernetes/test/images/nonewprivs
	@touch $@

# ginkgo's runner, for the suite's parallel processes (run.sh NODES), the version the suite links.
$(GINKGO_BIN): $(KUBELET_SRC)
	@mkdir -p $(dir $@)
	cd test/kubelet && go build -o $(abspath $@) github.com/onsi/ginkgo/v2/ginkgo
	@touch $@

$(CADVISOR_BIN): $(CADVISOR_SRC)
	@mkdir -p $(dir $@)
	cd test/kit/cadvisor && CGO_ENABLED=0 go build -trimpath -o $(abspath $@) .
	@touch $@

# Opt-in, not part of test: it runs for most of an hour on 2 cores. As root.
node-e2e: deps build node-e2e-build
	@# the host tools mk-images.sh copies into the agnhost stand-in
	@$(MAKE) --no-print-directory deps DEB_PACKAGES='curl netcat-openbsd'
	test/node-e2e/run.sh $(NODE_E2E_ARGS)

# The Density and Resource-usage specs (issue 52; `make node-e2e FOCUS=density` is the
# same): hours for all of them; ONLY=regex narrows them, RUNTIME=containerd runs them
# against containerd 2.x (make bench-deps). test/node-e2e/density-compare.sh runs both
# runtimes and writes the figures side by side.
.PHONY: node-e2e-density
node-e2e-density: deps build node-e2e-build
	@$(MAKE) --no-print-directory deps DEB_PACKAGES='curl netcat-openbsd'
	FOCUS=density test/node-e2e/run.sh $(NODE_E2E_ARGS)

# critest (cri-tools, the CRI conformance suite) against the daemon: test/kit builds its
# stand-in images and serves them from a loopback registry (crane, tools/go.mod), builds
# bin/critest once, runs the daemon on private paths and stops everything it started.
# Results in _output/critest/<time>/. Opt-in, as root. CRITEST_ARGS go to critest.
CRITEST_VERSION := v1.37.0
CRITEST_ARGS ?=
.PHONY: critest
critest: deps build
	@$(MAKE) --no-print-directory deps DEB_PACKAGES='jq'
	KIT_CRITEST_VERSION=$(CRITEST_VERSION) test/kit/critest.sh $(BIN) $(CRITEST_ARGS)

test: deps build kubelet
	go vet -tags '$(GOTAGS)' ./...
	go test -race -count=1 -tags '$(GOTAGS)' -p 2 -timeout 30m ./...
	$(MAKE) --no-print-directory fuzz
	$(MAKE) --no-print-directory test-upgrade

# The upgrade test (issue 50, test/upgrade): the previous release's daemon builds state on a
# node of its own, is stopped (SIGTERM in one run, SIGKILL in the other), and this build's
# daemon takes the node over. As root.
test-upgrade: deps build
	@set -euo pipefail; \
	sha="$$(git rev-parse --verify -q '$(PREV_COMMIT)^{commit}')" || { \
		echo "test-upgrade: commit $(PREV_COMMIT) is not in this clone: fetching the history from origin" >&2; \
		if [ "$$(git rev-parse --is-shallow-repository)" = true ]; then git fetch -q --unshallow origin || true; fi; \
		git fetch -q origin '$(PREV_COMMIT)' 2>/dev/null || true; \
		sha="$$(git rev-parse --verify -q '$(PREV_COMMIT)^{commit}')"; } || { \
		echo "test-upgrade: commit $(PREV_COMMIT) of $(PREV_VERSION) is not in this clone, nor could it be fetched: clone the whole history (git clone without --depth)" >&2; exit 1; }; \
	dir="$(CURDIR)/bin/prev/$$sha"; \
	if [ ! -x "$$dir/crijournal" ] || [ ! -x "$$dir/crijournal-pause" ] || [ ! -x "$$dir/crijournal-pause-sleep" ]; then \
		echo "test-upgrade: building $(PREV_VERSION) ($$sha) into $$dir"; \
		tmp="$$(mktemp -d)"; trap 'git worktree remove --force "$$tmp/src" >/dev/null 2>&1 || true; rm -rf "$$tmp"' EXIT; \
		git worktree add --detach -q "$$tmp/src" "$$sha"; \
		$(MAKE) --no-print-directory -C "$$tmp/src" build VERSION='$(PREV_VERSION:v%=%)'; \
		rm -rf "$$dir.new"; mkdir -p "$$dir.new"; \
		for b in crijournal crijournal-pause crijournal-pause-sleep; do install -m 0755 "$$tmp/src/bin/$$b" "$$dir.new/$$b"; done; \
		rm -rf "$$dir"; mv "$$dir.new" "$$dir"; \
	fi; \
	CRIJOURNAL_PREV_BIN="$$dir/crijournal" go test -race -count=1 -tags '$(GOTAGS)' -timeout 30m -v ./test/upgrade/

# Opt-in, not part of test: the tests of a cgroup v2 + AppArmor node, in the project's
# emulated VM (test/vm: QEMU without KVM, 10-20x slower than the host). As root.
test-vm: deps build kubelet
	test/vm/run.sh

# Opt-in, not part of test: power cuts of the emulated VM, whose persistent disk holds the
# node's state, at seeded random moments of a kubelet workload (test/vm/powerloss.sh; CUTS,
# SEED). As root.
test-powerloss: deps build kubelet
	test/vm/powerloss.sh

fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz: $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		out="$$(go test -tags '$(GOTAGS)' -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) "$${t%%:*}" 2>&1)" \
			|| { echo "$$out"; exit 1; }; \
		echo "$$out" | tail -n 1; \
	done

run: deps build
	@if [ "$$(id -u)" -ne 0 ]; then echo 'make run: must run as root' >&2; exit 1; fi
	@if [ -z "$$(ls $(CNI_CONF_DIR)/*.conf $(CNI_CONF_DIR)/*.conflist $(CNI_CONF_DIR)/*.json 2>/dev/null)" ]; then \
		echo "run: no CNI network in $(CNI_CONF_DIR), installing $(CNI_BRIDGE)"; \
		install -D -m 0644 $(CNI_BRIDGE) $(CNI_CONF_DIR)/$(notdir $(CNI_BRIDGE)); \
	fi
	@if [ ! -e /etc/containers/policy.json ]; then \
		echo "run: no /etc/containers/policy.json, installing the permissive $(POLICY)"; \
		install -D -m 0644 $(POLICY) /etc/containers/policy.json; \
	fi
	exec ./$(BIN) serve $(RUN_ARGS)

# install copies the daemon's binaries built by `make build` (it does not build: run it as
# root after building as anyone; $(BENCH_BIN), a development tool, is not installed), the
# systemd unit, bash completion and a crictl.yaml example; and, only where the node has none
# yet, a configuration file written by `crijournal config`, the default CNI network and the
# permissive signature policy. Files already there are never replaced, except the binary, the
# unit and the completion.
install:
	@for b in $(BIN) $(PAUSE_BIN) $(SLEEP_BIN); do test -x $$b || { echo "install: $$b missing: run make build first" >&2; exit 1; }; done
	@set -euo pipefail; d='$(DESTDIR)'; written=(); \
	put() { install -D -m "$$1" "$$2" "$$d$$3"; written+=("$$3"); echo "install: $$3"; }; \
	put 0755 $(BIN) $(BINDIR)/crijournal; \
	put 0755 $(PAUSE_BIN) $(BINDIR)/crijournal-pause; \
	put 0755 $(SLEEP_BIN) $(BINDIR)/crijournal-pause-sleep; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	sed 's|@BINDIR@|$(BINDIR)|g' contrib/systemd/crijournal.service > "$$tmp/crijournal.service"; \
	put 0644 "$$tmp/crijournal.service" $(SYSTEMDDIR)/crijournal.service; \
	$(BIN) completion bash > "$$tmp/crijournal.bash"; \
	put 0644 "$$tmp/crijournal.bash" $(COMPLETIONDIR)/crijournal; \
	put 0644 contrib/crictl.yaml $(SHAREDIR)/crictl.yaml; \
	if [ -e "$$d$(SYSCONFDIR)/crijournal/crijournal.toml" ]; then \
		echo "install: kept $(SYSCONFDIR)/crijournal/crijournal.toml"; \
	else \
		$(BIN) config --config /dev/null > "$$tmp/crijournal.toml"; \
		put 0644 "$$tmp/crijournal.toml" $(SYSCONFDIR)/crijournal/crijournal.toml; \
	fi; \
	if [ -n "$$(ls "$$d$(CNI_CONF_DIR)"/*.conf "$$d$(CNI_CONF_DIR)"/*.conflist "$$d$(CNI_CONF_DIR)"/*.json 2>/dev/null)" ]; then \
		echo "install: kept the CNI network in $(CNI_CONF_DIR)"; \
	else \
		put 0644 $(CNI_BRIDGE) $(CNI_CONF_DIR)/$(notdir $(CNI_BRIDGE)); \
	fi; \
	if [ -e "$$d$(SYSCONFDIR)/containers/policy.json" ]; then \
		echo "install: kept $(SYSCONFDIR)/containers/policy.json"; \
	else \
		put 0644 $(POLICY) $(SYSCONFDIR)/containers/policy.json; \
	fi; \
	manifest="$$d$(MANIFEST)"; touch "$$manifest"; \
	for f in "$${written[@]}"; do \
		grep -v "  $$f\$$" "$$manifest" > "$$tmp/manifest" || true; \
		(cd "$$d/" && sha256sum ".$$f") | sed 's|  \./|  /|' >> "$$tmp/manifest"; \
		cat "$$tmp/manifest" > "$$manifest"; \
	done; \
	echo "install: done; files in $(MANIFEST). Then: systemctl daemon-reload && systemctl enable --now crijournal"

# uninstall removes the files listed in install's manifest that are unchanged since, and the
# manifest. Changed ones (an edited configuration) are kept and named. The journal, the
# storage and everything else under the state directories are never touched.
uninstall:
	@set -euo pipefail; d='$(DESTDIR)'; manifest="$$d$(MANIFEST)"; \
	if [ ! -e "$$manifest" ]; then echo "uninstall: no $(MANIFEST): nothing installed" >&2; exit 1; fi; \
	while read -r sum path; do \
		f="$$d$$path"; \
		if [ ! -e "$$f" ]; then continue; fi; \
		if [ "$$(sha256sum < "$$f" | cut -d' ' -f1)" = "$$sum" ]; then rm -f "$$f"; echo "uninstall: removed $$path"; \
		else echo "uninstall: kept $$path (changed since install)"; fi; \
	done < "$$manifest"; \
	rm -f "$$manifest"; rmdir "$$d$(SHAREDIR)" 2>/dev/null || true

lint:
	@unformatted="$$(gofmt -l $$(find . -name '*.go' -not -path './.git/*'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt: not formatted:"; echo "$$unformatted"; exit 1; fi
	go vet -tags '$(GOTAGS)' ./...
	@command -v staticcheck >/dev/null || { \
		echo "lint: installing staticcheck $(STATICCHECK_VERSION) in $(TOOLS_BIN)"; \
		GOBIN=$(TOOLS_BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); }
	staticcheck -tags '$(GOTAGS)' ./...
	@linked="$$(go list -tags '$(GOTAGS)' -deps ./cmd/crijournal | grep -E '^($(DAEMON_FORBIDDEN_DEPS))' || true)"; \
	if [ -n "$$linked" ]; then echo "lint: the daemon links benchmark packages (see BENCH_BIN):"; echo "$$linked"; exit 1; fi
	@cri="$$(go list -tags '$(GOTAGS)' -deps ./creation | grep '^k8s.io/cri-api' || true)"; \
	if [ -n "$$cri" ]; then echo "lint: the creation engine imports CRI types (the server maps them):"; echo "$$cri"; exit 1; fi

bench: build
	go test -tags '$(GOTAGS)' -run '^$$' -bench . -count 5 ./...

clean:
	rm -rf bin/ $(DIST)/ coverage.out coverage.html *.coverprofile
	find . -name '*.test' -type f -not -path './.git/*' -delete
