module github.com/crijournal/crijournal/test/kit/cadvisor

go 1.26

// cAdvisor's root module names its library as v0.0.0 with a replace of its own (./lib),
// which a dependent does not see: the library of the same release stands in for it.
replace github.com/google/cadvisor/lib v0.0.0 => github.com/google/cadvisor/lib v0.61.0

require (
	github.com/google/cadvisor v0.61.0
	github.com/google/cadvisor/lib v0.61.0
	k8s.io/klog/v2 v2.130.1
)

require (
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/cyphar/filepath-securejoin v0.6.1 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/godbus/dbus/v5 v5.1.0 // indirect
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/opencontainers/cgroups v0.0.6 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	golang.org/x/sys v0.47.0 // indirect
	k8s.io/utils v0.0.0-20250502105355-0f33e8f1c979 // indirect
)
