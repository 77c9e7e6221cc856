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
GOTAGS := containers_image_openpgp,exclude_graphdriver_btrfs
export CGO_ENABLED := 1

VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
BIN := bin/crijournal
# End-to-end tests run this binary.
export CRIJOURNAL_BIN := $(abspath $(BIN))

# Debian packages the daemon and its tests run (gcc and libc6-dev for cgo and -race).
DEB_PACKAGES := runc conmon containernetworking-plugins iproute2 util-linux iptables gcc libc6-dev busybox-static
CRICTL_VERSION := v1.37.0
STATICCHECK_VERSION := v0.8.2

CNI_CONF_DIR := /etc/cni/net.d
CNI_BRIDGE := contrib/cni/10-crijournal-bridge.conflist
# Extra arguments of `make run`, such as RUN_ARGS='--log-level=debug'.
RUN_ARGS ?=

.PHONY: help deps build test run lint bench clean

help:
	@echo 'make deps   install the Debian packages and crictl the daemon and tests need'
	@echo 'make build  build $(BIN)'
	@echo 'make test   deps, build, go vet, then every test with -race (as root)'
	@echo 'make run    deps, build, a default CNI bridge if none, then serve (as root)'
	@echo 'make lint   gofmt, go vet, staticcheck'
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

build:
	go build -tags '$(GOTAGS)' -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/crijournal

test: deps build
	go vet -tags '$(GOTAGS)' ./...
	go test -race -count=1 -tags '$(GOTAGS)' -p 2 -timeout 30m ./...

run: deps build
	@if [ "$$(id -u)" -ne 0 ]; then echo 'make run: must run as root' >&2; exit 1; fi
	@if ! ls $(CNI_CONF_DIR)/*.conf $(CNI_CONF_DIR)/*.conflist $(CNI_CONF_DIR)/*.json >/dev/null 2>&1; then \
		echo "run: no CNI network in $(CNI_CONF_DIR), installing $(CNI_BRIDGE)"; \
		install -D -m 0644 $(CNI_BRIDGE) $(CNI_CONF_DIR)/$(notdir $(CNI_BRIDGE)); \
	fi
	exec ./$(BIN) serve $(RUN_ARGS)

lint:
	@unformatted="$$(gofmt -l $$(find . -name '*.go' -not -path './.git/*'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt: not formatted:"; echo "$$unformatted"; exit 1; fi
	go vet -tags '$(GOTAGS)' ./...
	@command -v staticcheck >/dev/null || { \
		echo "lint: installing staticcheck $(STATICCHECK_VERSION) in $(TOOLS_BIN)"; \
		GOBIN=$(TOOLS_BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); }
	staticcheck -tags '$(GOTAGS)' ./...

bench: build
	go test -tags '$(GOTAGS)' -run '^$$' -bench . -count 5 ./...

clean:
	rm -rf bin/ coverage.out coverage.html *.coverprofile
	find . -name '*.test' -type f -not -path './.git/*' -delete
