package config

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/crijournal/crijournal/layout"
)

// DefaultFile is the configuration file read when no other path is given.
const DefaultFile = "/etc/crijournal/crijournal.toml"

// EnvPrefix starts the name of every environment variable that sets a key.
const EnvPrefix = "CRIJOURNAL"

// ErrUnknownKey is returned (inside a *KeyError) when the configuration file
// has a key that crijournal does not know.
var ErrUnknownKey = errors.New("unknown configuration key")

// A KeyError reports an unknown key or an invalid value of one key.
type KeyError struct {
	Key    string // the TOML key, such as "cache_ttl" or "runtimes.runc.path"
	Source string // where the value came from, such as "flag --cache-ttl"; "" when not known
	Err    error
}

func (e *KeyError) Error() string {
	if e.Source == "" {
		return fmt.Sprintf("%s: %v", e.Key, e.Err)
	}
	return fmt.Sprintf("%s: %v (from %s)", e.Key, e.Err, e.Source)
}

func (e *KeyError) Unwrap() error { return e.Err }

// Config is the whole configuration of the daemon. The `toml` tag of each
// field is its key; `help` is the one-line text of its flag and of its
// comment in the output of TOML.
type Config struct {
	// Root is the state directory, kept across reboots: the journal and the
	// storage live under it unless configured elsewhere.
	// Default: /var/lib/crijournal.
	Root string `toml:"root" help:"state directory (journal, storage)"`

	// RunRoot is the directory of state that does not outlive a reboot.
	// Default: /run/crijournal.
	RunRoot string `toml:"run_root" help:"directory of state that does not outlive a reboot"`

	// JournalPath is the bbolt journal file. Default: "", meaning
	// <root>/journal.db; JournalFile returns the effective path.
	JournalPath string `toml:"journal_path" help:"journal database file (empty: <root>/journal.db)"`

	// Socket is the unix socket the CRI gRPC services listen on. It must be
	// shorter than 108 bytes (the limit of a unix socket address).
	// Default: /run/crijournal/crijournal.sock.
	Socket string `toml:"socket" help:"unix socket of the CRI services"`

	// NamespaceDir is where pinned namespaces (net, ipc, uts) are
	// bind-mounted. Default: /var/run/crijournal/ns.
	NamespaceDir string `toml:"namespace_dir" help:"directory of pinned namespaces"`

	// CNIConfDir is the directory of CNI network configurations; the first
	// one in lexical order is the pod network. Default: /etc/cni/net.d.
	CNIConfDir string `toml:"cni_conf_dir" help:"directory of CNI network configurations"`

	// CNIPluginDirs are the directories searched for CNI plugin binaries, in
	// order. Default: ["/opt/cni/bin", "/usr/lib/cni"] (the standard
	// directory, then Debian's).
	CNIPluginDirs []string `toml:"cni_plugin_dirs" help:"directories of CNI plugin binaries"`

	// CNICacheDir is libcni's cache of ADD results (needed for DEL). Default:
	// "", meaning libcni's own default, /var/lib/cni.
	CNICacheDir string `toml:"cni_cache_dir" help:"libcni result cache (empty: libcni's default, /var/lib/cni)"`

	// NetworkTimeout bounds a CNI ADD. The ADD runs detached from the CRI
	// request under this timeout, so that a network that is slower than the
	// kubelet's deadline still finishes and is cached for the retry.
	// It should exceed the kubelet's RunPodSandbox deadline (4m by default).
	// Default: 5m.
	NetworkTimeout time.Duration `toml:"network_timeout" help:"timeout of a CNI ADD, which runs detached from the request"`

	// CacheTTL is how long a creation that finished after its request's
	// deadline is kept for the kubelet's retry, counted from the last request
	// for the name. Default: 2m.
	CacheTTL time.Duration `toml:"cache_ttl" help:"how long a creation that finished after its request timed out is kept for the retry"`

	// CacheSweepInterval is how often expired cached creations are looked
	// for and undone. Default: 10s.
	CacheSweepInterval time.Duration `toml:"cache_sweep_interval" help:"how often expired cached creations are undone"`

	// StatsCollectPeriod is how often the disk usage of the containers' writable
	// layers is measured, one container after another, by one background walk.
	// Stats calls answer from the last measurement (with its time), so a shorter
	// period gives fresher figures for more disk reads; a container created since
	// the last pass has no writable-layer figure until the next one (containerd's
	// stats_collect_period). Default: 10s.
	StatsCollectPeriod time.Duration `toml:"stats_collect_period" help:"how often the containers' writable layers are measured for stats"`

	// IncludedPodMetrics are the groups of metrics that ListPodSandboxMetrics reports
	// and ListMetricDescriptors describes (the kubelet's /metrics/cadvisor with
	// PodAndContainerStatsFromCRI), as CRI-O's included_pod_metrics: "cpu", "memory",
	// "network", "disk", "diskIO", "process", "spec", "oom", or "all" as the only
	// element. container_last_seen is always reported. Each group costs reads per
	// container on every call: a few cgroup files (cpu, memory, oom, diskIO), cgroup.procs
	// and every process's /proc/<pid>/fd (process), one netlink dump per pod (network);
	// disk reports the writable-layer figure of stats_collect_period's background pass
	// and spec the recorded resources, neither reading anything. CRI-O's "hugetlb" and
	// "pressure" are not implemented: they are refused. Default: ["all"], so that a
	// kubelet that serves /metrics/cadvisor from the CRI gets what cAdvisor gave it
	// (CRI-O's default, [], reports only container_last_seen); [] is the cheap setting.
	IncludedPodMetrics []string `toml:"included_pod_metrics" help:"metric groups of ListPodSandboxMetrics: cpu, memory, network, disk, diskIO, process, spec, oom, or all"`

	// UndoRetryMin is the first delay before an undo that failed is retried;
	// the delay doubles on each failure up to UndoRetryMax. Default: 1s.
	UndoRetryMin time.Duration `toml:"undo_retry_min" help:"first delay before a failed undo is retried"`

	// UndoRetryMax caps the delay between retries of a failed undo. It must
	// not be below UndoRetryMin. Default: 5m.
	UndoRetryMax time.Duration `toml:"undo_retry_max" help:"longest delay between retries of a failed undo"`

	// UndoTimeout bounds one undo (a CNI DEL, a runtime delete): one still running
	// then is cancelled and retried later, so a resource that cannot be cleaned
	// never holds up startup recovery or a removal. Default: 2m.
	UndoTimeout time.Duration `toml:"undo_timeout" help:"longest run of one undo before it is cancelled and retried later"`

	// ExecDrainTimeout bounds how long ExecSync goes on reading a command's output once
	// the command has exited: a process it left running in the background may hold the
	// output open for as long as it lives, and the answer (exit code, output read by
	// then) must not wait for it (containerd's drain_exec_sync_io_timeout). Default: 2s.
	ExecDrainTimeout time.Duration `toml:"exec_drain_timeout" help:"how long an exec goes on reading output after its command exited"`

	// ExecSyncMaxConcurrent caps the ExecSync calls (the kubelet's exec probes, crictl
	// exec --sync) that run at once in the daemon. One more is refused at once with
	// ResourceExhausted, not queued: the kubelet throws a probe that errored away and
	// probes again at its next period, whereas one that waited out its deadline would
	// count as a failed probe, and could restart a healthy container on a node that is
	// only busy. Each call keeps up to 15 MiB of output, so the cap also bounds what
	// output can take (480 MiB at 32). It must be at least 1. Default: 32, ten times
	// what 110 pods with three exec probes each, every 10 s and 100 ms apiece, keep
	// running.
	ExecSyncMaxConcurrent int `toml:"exec_sync_max_concurrent" help:"most ExecSync calls running at once; more are refused (ResourceExhausted)"`

	// JournalLockTimeout is how long opening the journal waits for the file
	// lock held by another process (such as a daemon that is still running)
	// before it fails. Default: 1s.
	JournalLockTimeout time.Duration `toml:"journal_lock_timeout" help:"how long opening the journal waits for its file lock"`

	// JournalReserveMiB is the disk space, in MiB, kept allocated to the journal file
	// ahead of its growth (preallocated past its end), so that the stops and removals
	// that free a full disk still commit: without it, the daemon stops at the first
	// commit that must grow the file on a full disk (fail-stop). While the reserve
	// cannot be kept whole, or the journal's disk has less room than the reserve, new
	// pods and containers are refused (ResourceExhausted; Status condition
	// JournalHasSpace false) and everything else goes on. 0 turns the reserve off.
	// Default: 16.
	JournalReserveMiB int `toml:"journal_reserve_mib" help:"disk space in MiB kept allocated for the journal's growth, so that removals commit on a full disk (0: off)"`

	// JournalNoSync turns off the fsync of every journal commit.
	// THIS IS UNSAFE: a crash or power loss can lose or corrupt the journal
	// and leak what it recorded. For benchmarks only. Default: false.
	JournalNoSync bool `toml:"journal_no_sync" help:"THIS IS UNSAFE, for benchmarks only: do not fsync journal commits"`

	// LogLevel is the least severe level logged: debug, info, warn or error.
	// Default: info.
	LogLevel string `toml:"log_level" help:"log level: debug, info, warn or error"`

	// LogFormat is the log format: text or json (log/slog's handlers).
	// Default: text.
	LogFormat string `toml:"log_format" help:"log format: text or json"`

	// MetricsAddress is the host:port of the Prometheus metrics endpoint: a
	// loopback address, or a node address a cluster's Prometheus can scrape
	// (then consider metrics_cert and metrics_key).
	// Default: "", meaning no metrics endpoint.
	MetricsAddress string `toml:"metrics_address" help:"host:port of the metrics endpoint (empty: off)"`

	// PprofAddress is the host:port of a Go profiling endpoint (net/http/pprof
	// under /debug/pprof/), for finding where the daemon's time and memory go.
	// It must be a loopback address (127.0.0.1, [::1] or localhost): profiles
	// and goroutine dumps show request contents, and a CPU profile costs the
	// daemon while it runs. Port 0 picks a free port (the log says which). It
	// serves plain HTTP and stops with the daemon.
	// Default: "", meaning no profiling endpoint.
	PprofAddress string `toml:"pprof_address" help:"loopback host:port of the Go pprof endpoint (empty: off)"`

	// TracingEndpoint is the OpenTelemetry collector the daemon exports its traces to,
	// over OTLP/gRPC: host:port (plain gRPC, as CRI-O's tracing_endpoint; a collector
	// on the node, such as 127.0.0.1:4317), http://host:port (plain) or
	// https://host:port (TLS; OTEL_EXPORTER_OTLP_CERTIFICATE names a CA). Each CRI call
	// is a server span, a child of the kubelet's trace when its request carries a W3C
	// traceparent, and each journaled step a span within it (see the README). The
	// standard OTEL_* environment is honoured: OTEL_EXPORTER_OTLP_ENDPOINT (or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) turns tracing on when this key is empty,
	// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off, and
	// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS and the
	// like apply.
	// Default: "", meaning off unless the environment names a collector.
	TracingEndpoint string `toml:"tracing_endpoint" help:"OTLP/gRPC collector of traces: host:port, http://host:port or https://host:port (empty: OTEL_EXPORTER_OTLP_ENDPOINT, else off)"`

	// TracingSamplingRatePerMillion is how many of a million traces that start in the
	// daemon are sampled: calls that carry no trace context (crictl's), recovery at
	// start and the background undos. A call that carries one (a kubelet with tracing
	// on) is sampled as its caller decided, whatever this says. 1000000 samples every
	// trace. OTEL_TRACES_SAMPLER, when set, replaces this. CRI-O's key of the same name,
	// and its default.
	// Default: 0, meaning only callers' sampled traces.
	TracingSamplingRatePerMillion int `toml:"tracing_sampling_rate_per_million" help:"traces started here sampled per million, 0 to 1000000; a caller's trace context is always followed"`

	// StorageDriver is the containers/storage graph driver: "overlay",
	// "vfs", or "" to choose overlay when the kernel supports it and vfs
	// otherwise. Default: "".
	StorageDriver string `toml:"storage_driver" help:"storage driver: overlay, vfs, or empty to choose"`

	// StorageRoot is the directory of images and container root
	// filesystems. Default: "", meaning <root>/storage; see StorageRootDir.
	StorageRoot string `toml:"storage_root" help:"storage directory (empty: <root>/storage)"`

	// StorageRunRoot is the storage's directory of state that does not
	// outlive a reboot. Default: "", meaning <run_root>/storage; see
	// StorageRunRootDir.
	StorageRunRoot string `toml:"storage_run_root" help:"storage run directory (empty: <run_root>/storage)"`

	// ImageStore splits the image file system from the containers' (the kubelet's
	// KubeletSeparateDiskGC, on by default since 1.31): images are pulled into this
	// directory, often on a disk of its own, and the containers' writable layers stay on
	// storage_root. It is containers/storage's image store (imagestore in
	// containers-storage.conf(5), CRI-O's imagestore): its layers and image records, while
	// storage_root keeps the containers, their layers and records. ImageFsInfo then reports
	// it in image_filesystems and storage_root in container_filesystems; without it both
	// report storage_root. The kubelet's image garbage collection measures the first
	// (through its CRI stats provider, which also counts the containers' writable layers
	// against it: Kubernetes v1.37's "for CRI Stats Provider we don't support separate
	// disks yet"). Images pulled before it was set stay in storage_root and are still
	// used. Unsetting it or moving it to another directory while containers made with it
	// exist stops the daemon at start, saying so: they would lose their images (remove
	// the node's pods first); with none, the change is taken, and the images of the old
	// directory are no longer seen (the kubelet pulls them again). It must be absolute
	// and differ from the storage root. Default: "", meaning no split.
	ImageStore string `toml:"image_store" help:"directory images are pulled into, apart from the containers' storage_root (empty: storage_root)"`

	// ImagePullProgressTimeout cancels an image pull that has received no bytes from the
	// registry for this long while it waits for some: a registry that stalls in the middle
	// of a blob (or before the first) would otherwise hold the pull, and the kubelet's
	// PullImage, which has no deadline, for ever. Only waiting on the registry counts, not
	// the pull's whole time: unpacking a layer that has arrived is not waiting. The pull
	// fails with DeadlineExceeded, saying so, and leaves nothing in the storage. As
	// containerd's image_pull_progress_timeout (CRI-O's pull_progress_timeout is off by
	// default). 0: no timeout. Default: 5m.
	ImagePullProgressTimeout time.Duration `toml:"image_pull_progress_timeout" help:"cancel a pull that receives no bytes from the registry for this long (0: never)"`

	// PinnedImages are the images the kubelet's image garbage collection must leave:
	// ListImages and ImageStatus report them pinned, and the kubelet skips a pinned image
	// whatever its disk usage or age (imagesInEvictionOrder in
	// pkg/kubelet/images/image_gc_manager.go). As CRI-O's pinned_images, each is an exact
	// name, a glob or a keyword: "registry.k8s.io/pause:3.10" (exact: a fully qualified
	// name with a tag or a digest, as crictl images shows it), "registry.k8s.io/pause:*"
	// (glob: every name that starts with what comes before the trailing *), "*pause*"
	// (keyword: every name that contains it). Case is ignored. An image is pinned when any
	// of its tags or digests matches. A pattern that could never match is refused at start
	// (a short name such as "busybox:1.36", which the store names
	// docker.io/library/busybox:1.36; a name without tag or digest; a * elsewhere). It
	// pins, and removes nothing from RemoveImage's reach: crictl rmi still removes a pinned
	// image. CRI-O adds its pause_image to the list; crijournal has no pause image (its
	// pause process is the pause_path program, run from the host), and the kubelet (v1.37:
	// its --pod-infra-container-image is gone) names no sandbox image to the runtime, so
	// there is none to add. Default: [].
	PinnedImages []string `toml:"pinned_images" help:"images the kubelet's image garbage collection leaves: exact names, globs (prefix*) or keywords (*word*)"`

	// StorageTransientStore keeps containers/storage's records of containers
	// (and of their writable layers) in the storage run directory, written
	// without fsync, and mounts their root filesystems with overlay's volatile
	// option: containers/storage's transient store mode (transient_store in
	// storage.conf). A CRI node's containers never outlive a reboot (the kubelet
	// makes new ones), and their creation and removal then wait for no disk
	// flush. Images stay durable in the storage directory. Turning it off while
	// containers made with it exist stops the daemon at start, saying so: the
	// store would not see them. Default: true.
	StorageTransientStore bool `toml:"storage_transient_store" help:"keep containers' storage records in the storage run directory, unsynced (transient store mode)"`

	// DefaultRuntime is the runtime handler used when a pod names none; it
	// must be a key of Runtimes. Default: runc.
	DefaultRuntime string `toml:"default_runtime" help:"runtime handler of pods that name none"`

	// Runtimes maps a runtime handler name (the RuntimeClass handler, a
	// lower-case DNS label) to its OCI runtime. In the file each is a table
	// [runtimes.<name>] with keys path and root; tables in the file are
	// merged with the defaults. Default: {"runc": {Path: "", Root:
	// "/run/crijournal/runc"}}.
	Runtimes map[string]Runtime `toml:"runtimes"`

	// RefuseVulnerableRuntime stops the daemon at start when the runtime of a handler
	// is a runc release without the fixes of runc's container breakouts CVE-2025-31133,
	// CVE-2025-52565 and CVE-2025-52881 (any runc before 1.2.8, 1.3.0 to 1.3.2,
	// 1.4.0-rc.1 and rc.2), or a runc that does not say its release. Whether or not it
	// is set, the daemon warns of such a runtime at start, and a verbose Status (crictl
	// info) shows every handler's version and verdict under runtimeVersions. Runtimes
	// other than runc (crun) are not judged by runc's release numbers. Off, a node whose
	// only runc is its distribution's (Debian 12's is 1.1.5) still starts, warned; and a
	// distribution's build may carry the fixes under an older number. Default: false.
	RefuseVulnerableRuntime bool `toml:"refuse_vulnerable_runtime" help:"refuse to start when a handler's runc lacks the fixes of known container breakouts"`

	// LogSizeMax is the size in bytes a container's log file may reach (conmon's
	// --log-size-max, CRI-O's log_size_max): conmon truncates it when a write would take
	// it beyond, and the lines in it are lost. It bounds a runaway writer where nothing
	// rotates the log (crictl without a kubelet). Under a kubelet it must never act: the
	// kubelet rotates a log once it is past its containerLogMaxSize (10Mi by default),
	// looking every 10 s, so the bound must exceed containerLogMaxSize and what the
	// fastest container writes between two looks; and only a conmon that starts its count
	// again when the kubelet's rotation reopens the log (conmon 2.1.10 and later) keeps to
	// that: an older one (Debian 12's 2.1.6) counts all a container ever wrote, and each
	// time that reaches the bound truncates the log the kubelet has not rotated yet.
	// 0 means AutoLogSizeMax with conmon 2.1.10 or later, and no bound with an older one
	// (the daemon says so at start). A negative value means no bound. A positive one, at
	// least 8192 (conmon's read buffer), is given to conmon whatever its version (the
	// daemon warns of an old one). Default: 0.
	LogSizeMax int64 `toml:"log_size_max" help:"size in bytes a container's log may reach before conmon truncates it; 0: 1 GiB with conmon >= 2.1.10, else none; negative: none"`

	// ConmonPath is the conmon binary. Default: "", meaning "conmon" looked
	// up in PATH.
	ConmonPath string `toml:"conmon_path" help:"conmon binary (empty: look up in PATH)"`

	// PausePath is the pause program, the init of pods' shared pid namespaces
	// (cmd/crijournal-pause). Default: "", meaning crijournal-pause beside the
	// daemon's own binary, where make build and make install put it. Its sleeper,
	// crijournal-pause-sleep, is looked for beside it (see package netns).
	PausePath string `toml:"pause_path" help:"pause program (empty: crijournal-pause beside the daemon's binary)"`

	// CDISpecDirs are the directories of Container Device Interface (CDI) spec
	// files (*.json, *.yaml) that name the devices a container may ask for in
	// CDI_devices or cdi.k8s.io/ annotations. A device defined in several
	// directories is taken from the later one. They are read again at every
	// creation that asks for a CDI device; a missing directory holds none.
	// Empty: no CDI devices. Default: ["/etc/cdi", "/var/run/cdi"], as CRI-O
	// and containerd.
	CDISpecDirs []string `toml:"cdi_spec_dirs" help:"directories of CDI device spec files, later ones taking precedence"`

	// StreamAddress is the address the streaming server (exec, attach,
	// port-forward) listens on. Default: 127.0.0.1.
	StreamAddress string `toml:"stream_address" help:"address of the streaming server"`

	// StreamPort is the port of the streaming server, as a string; "0"
	// picks a free port. Default: "0".
	StreamPort string `toml:"stream_port" help:"port of the streaming server (0: any free port)"`

	// Registries are pull mirrors added on top of registries_conf: an image
	// whose name starts with Prefix is pulled from Location first, then from
	// what registries.conf says about Prefix (its mirrors, then the registry
	// itself). In the file each is a table [[registries]] with keys prefix,
	// location and insecure; they are read from the file only (no
	// environment variable or flag). When several prefixes match a name, the
	// longest wins. Default: none.
	Registries []Registry `toml:"registries"`

	// RegistriesConf is the node's containers-registries.conf(5), as Podman
	// and CRI-O read it: mirrors, blocked and insecure registries, short-name
	// aliases and mode, unqualified-search-registries. Read at start; a
	// missing file configures nothing. The mirrors of [[registries]] are added
	// on top of it: for their prefix they come first, before the mirrors the
	// file gives, and a registry the file blocks stays blocked.
	// Default: /etc/containers/registries.conf.
	RegistriesConf string `toml:"registries_conf" help:"containers registries.conf of the node (mirrors, blocked, insecure, short names); empty or missing: none"`

	// RegistriesConfDir is the drop-in directory of registries_conf, read after
	// it in lexical order of the file names. Default:
	// /etc/containers/registries.conf.d.
	RegistriesConfDir string `toml:"registries_conf_dir" help:"drop-in directory of registries_conf; empty or missing: none"`

	// SignaturePolicy is the containers-policy.json(5) every pull must
	// satisfy; an image it rejects is not pulled (PermissionDenied, naming the
	// policy). It is read again at every pull. `make install` installs a
	// permissive one (insecureAcceptAnything) when the node has none; while it
	// is missing every pull fails. Default: /etc/containers/policy.json.
	SignaturePolicy string `toml:"signature_policy" help:"containers policy.json every pull must satisfy"`

	// GlobalAuthFile is the node-wide registry credentials file, in the
	// containers-auth.json(5) format (as CRI-O's global_auth_file), used for
	// a registry or mirror the pull's own credentials do not cover. It may be
	// missing. Default: "", meaning <root>/image-cache/auth.json.
	GlobalAuthFile string `toml:"global_auth_file" help:"registry credentials file of the node, containers auth.json format (empty: <root>/image-cache/auth.json)"`

	// MetricsCert is a PEM certificate (chain) for the metrics endpoint:
	// with metrics_key set too, it speaks HTTPS. Read at start.
	// Default: "", plain HTTP.
	MetricsCert string `toml:"metrics_cert" help:"PEM certificate of the metrics endpoint; with metrics_key it serves HTTPS"`

	// MetricsKey is the PEM private key of metrics_cert. Default: "".
	MetricsKey string `toml:"metrics_key" help:"PEM key of metrics_cert"`

	// StreamTLSCert is the PEM certificate (chain) the streaming server
	// presents; with StreamTLSKey it serves HTTPS instead of plain HTTP,
	// which a streaming server that is not on loopback should. Both or
	// neither. The files are read once, at start. Default: "", plain HTTP.
	StreamTLSCert string `toml:"stream_tls_cert" help:"PEM certificate of the streaming server (empty: plain HTTP)"`

	// StreamTLSKey is the PEM private key of StreamTLSCert. Default: "".
	StreamTLSKey string `toml:"stream_tls_key" help:"PEM private key of the streaming server's certificate"`
	// CgroupManager is the cgroup driver, what RuntimeConfig tells the kubelet, which
	// must use the same one (its cgroupDriver):
	// "cgroupfs": cgroup parents are cgroupfs paths such as /kubepods/pod<uid>, and
	// crijournal and runc make the cgroups in the file system.
	// "systemd": cgroup parents are slice names such as kubepods-burstable-pod<uid>.slice,
	// and every cgroup is a systemd unit asked for over D-Bus: a pod's slice (when the
	// kubelet did not make it), a transient scope crijournal-<id>.scope with Delegate=yes
	// for each container (runc --systemd-cgroup) and for a pod's pause process, and
	// crijournal-conmon-<id>.scope for each container's conmon. systemd must run (PID 1
	// of the daemon's pid namespace). Default: cgroupfs.
	CgroupManager string `toml:"cgroup_manager" help:"cgroup driver, as the kubelet's cgroupDriver: cgroupfs or systemd"`

	// SeccompUnavailable says the node has no seccomp support (say, a runtime
	// built without libseccomp). Containers that ask for a RuntimeDefault or
	// Localhost seccomp profile are then refused with an error that says so,
	// instead of running unconfined unnoticed; Unconfined and unset run. A
	// kernel without seccomp is detected without it. Default: false.
	SeccompUnavailable bool `toml:"seccomp_unavailable" help:"the node has no seccomp: refuse containers that ask for a seccomp profile"`

	// EnableNRI turns on the Node Resource Interface: NRI plugins (started from
	// nri_plugin_dir, or connecting to nri_listen) are told about pods and
	// containers and may adjust containers as they are created. With no plugin it
	// costs a lock per event. Default: true, as in CRI-O and containerd.
	EnableNRI bool `toml:"enable_nri" help:"enable NRI (Node Resource Interface) plugins"`

	// NRIListen is the unix socket external NRI plugins connect to. It must be
	// shorter than 108 bytes. Default: /var/run/nri/nri.sock.
	NRIListen string `toml:"nri_listen" help:"unix socket NRI plugins connect to"`

	// NRIPluginDir is the directory of NRI plugins the daemon starts itself, each an
	// executable named <index>-<name>; a missing directory holds none.
	// Default: /opt/nri/plugins.
	NRIPluginDir string `toml:"nri_plugin_dir" help:"directory of NRI plugins the daemon starts"`

	// NRIPluginConfigDir is the directory of the configuration of the plugins in
	// nri_plugin_dir (<index>-<name>.conf or <name>.conf). Default: /etc/nri/conf.d.
	NRIPluginConfigDir string `toml:"nri_plugin_config_dir" help:"directory of the NRI plugins' configuration"`

	// NRIPluginRegistrationTimeout bounds how long a plugin may take to register once
	// connected or started. Default: 5s.
	NRIPluginRegistrationTimeout time.Duration `toml:"nri_plugin_registration_timeout" help:"how long an NRI plugin may take to register"`

	// NRIPluginRequestTimeout bounds one plugin's handling of one event; a plugin that
	// takes longer is disconnected (its failure policy then decides whether the
	// request fails). The steps that call the plugins run detached from the CRI
	// request, so a creation whose plugins outlive the request is cached for the
	// retry. It also bounds a plugin's Synchronize, the whole listing of the node a
	// plugin gets when it connects, which a plugin may take time over (critest holds
	// it 2 s), and one cut off then misses the containers made meanwhile. Default: 5s
	// (containerd and CRI-O: 2s).
	NRIPluginRequestTimeout time.Duration `toml:"nri_plugin_request_timeout" help:"how long an NRI plugin may take to handle one event"`

	// NRIDisableConnections refuses external plugins: only those of nri_plugin_dir
	// run, and nri_listen is not created. Default: false.
	NRIDisableConnections bool `toml:"nri_disable_connections" help:"accept no external NRI plugin connections"`
}

// Registry redirects the pulls of images whose name starts with a prefix.
type Registry struct {
	// Prefix is matched against the fully qualified image name (short names
	// are qualified first: "busybox" is docker.io/library/busybox): a
	// registry host ("registry.k8s.io"), or a host and a repository path
	// ("docker.io/library"). A name matches when it equals Prefix or
	// continues it with "/", ":" or "@".
	Prefix string `toml:"prefix"`
	// Location replaces Prefix in the name to pull: host[:port][/path],
	// without a scheme.
	Location string `toml:"location"`
	// Insecure allows plain HTTP, and HTTPS without certificate
	// verification, when pulling from Location. Default: false.
	Insecure bool `toml:"insecure"`
}

// Runtime is one OCI runtime handler.
type Runtime struct {
	// Path is the runtime binary (runc, crun, ...). Default: "", meaning
	// BundledRunc when it is installed (`make deps` builds it), else runc
	// looked up in PATH; see Config.RuntimePath.
	Path string `toml:"path"`
	// Root is the runtime's state directory (its --root). Default: "",
	// meaning <run_root>/<handler>; see Config.RuntimeRoot.
	Root string `toml:"root"`
}

// Default returns the default configuration.
func Default() Config {
	return Config{
		Root:               "/var/lib/crijournal",
		RunRoot:            "/run/crijournal",
		Socket:             "/run/crijournal/crijournal.sock",
		NamespaceDir:       "/var/run/crijournal/ns",
		CNIConfDir:         "/etc/cni/net.d",
		CNIPluginDirs:      []string{"/opt/cni/bin", "/usr/lib/cni"},
		CDISpecDirs:        []string{"/etc/cdi", "/var/run/cdi"},
		NetworkTimeout:     5 * time.Minute,
		CacheTTL:           2 * time.Minute,
		CacheSweepInterval: 10 * time.Second,
		StatsCollectPeriod: 10 * time.Second,
		IncludedPodMetrics: []string{PodMetricsAll},
		UndoRetryMin:       time.Second,
		UndoRetryMax:       5 * time.Minute,
		UndoTimeout:        2 * time.Minute,
		ExecDrainTimeout:   2 * time.Second,
		JournalLockTimeout: time.Second,
		JournalReserveMiB:  DefaultJournalReserveMiB,
		LogLevel:           "info",
		LogFormat:          "text",
		DefaultRuntime:     "runc",
		Runtimes: map[string]Runtime{
			"runc": {Root: "/run/crijournal/runc"},
		},
		StreamAddress:     "127.0.0.1",
		StreamPort:        "0",
		RegistriesConf:    "/etc/containers/registries.conf",
		RegistriesConfDir: "/etc/containers/registries.conf.d",
		SignaturePolicy:   "/etc/containers/policy.json",
		CgroupManager:     CgroupManagerCgroupfs,

		StorageTransientStore:    true,
		ImagePullProgressTimeout: 5 * time.Minute,
		PinnedImages:             []string{},
		ExecSyncMaxConcurrent:    32,

		EnableNRI:                    true,
		NRIListen:                    "/var/run/nri/nri.sock",
		NRIPluginDir:                 "/opt/nri/plugins",
		NRIPluginConfigDir:           "/etc/nri/conf.d",
		NRIPluginRegistrationTimeout: 5 * time.Second,
		NRIPluginRequestTimeout:      5 * time.Second,
	}
}

// DefaultJournalReserveMiB is the default of journal_reserve_mib: room for thousands of
// removals' commits, a trifle of a node's disk.
const DefaultJournalReserveMiB = 16

// MaxJournalReserveMiB is the largest journal_reserve_mib Validate takes.
const MaxJournalReserveMiB = 1024

// JournalReserve returns journal_reserve_mib in bytes.
func (c Config) JournalReserve() int64 { return int64(c.JournalReserveMiB) << 20 }

// SystemdCgroup reports whether the cgroup driver is systemd (cgroup_manager): the one
// place that asks.
func (c Config) SystemdCgroup() bool { return c.CgroupManager == CgroupManagerSystemd }

// Layout is where the node keeps things, derived from the path keys (see package layout).
func (c Config) Layout() layout.Node {
	roots := make(map[string]string, len(c.Runtimes))
	for h, rt := range c.Runtimes {
		roots[h] = rt.Root
	}
	return layout.Node{
		Root: c.Root, RunRoot: c.RunRoot, Socket: c.Socket, NamespaceDir: c.NamespaceDir,
		JournalPath: c.JournalPath, StorageRoot: c.StorageRoot, StorageRunRoot: c.StorageRunRoot,
		CNIConfDir: c.CNIConfDir, CNICacheDir: c.CNICacheDir, RuntimeRoots: roots,
	}
}

// AutoLogSizeMax is the bound of a container's log of log_size_max = 0 with a conmon
// that starts its count again at a reopen: 1 GiB, a hundred times the kubelet's default
// containerLogMaxSize, so that under a kubelet only a container writing about 100 MiB/s
// for the 10 s between the kubelet's looks is cut.
const AutoLogSizeMax = 1 << 30

// BundledRunc is where `make deps` installs the project's runc (a release
// newer than Debian's, with idmapped mounts for user namespaces). Handlers
// without a path run it when it is there.
const BundledRunc = "/usr/local/libexec/crijournal/runc"

// RuntimePath returns the runtime binary of the handler: its Path; or
// BundledRunc when that is empty and BundledRunc is an executable file; or
// "", meaning runc looked up in PATH. The handler need not exist.
func (c Config) RuntimePath(handler string) string {
	return runtimePath(c.Runtimes[handler].Path, BundledRunc)
}

func runtimePath(path, bundled string) string {
	if path != "" {
		return path
	}
	if fi, err := os.Stat(bundled); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return bundled
	}
	return ""
}

// SlogLevel returns LogLevel as a slog.Level; a LogLevel that Validate
// rejects gives slog.LevelInfo.
func (c Config) SlogLevel() slog.Level {
	switch c.LogLevel {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// TOML renders c as a complete TOML configuration file: every key, each
// after a comment with its meaning, environment variable and flag. Load
// reads the result back to a Config equal to c.
func (c Config) TOML() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString("# crijournal configuration. Every key is listed; a key left out of the file\n")
	buf.WriteString("# keeps its default. Keys set by CRIJOURNAL_<KEY> or a flag override the file.\n")
	v := reflect.ValueOf(c)
	for _, f := range scalarFields {
		value := v.Field(f.index).Interface()
		if d, ok := value.(time.Duration); ok {
			value = d.String()
		}
		line, err := toml.Marshal(map[string]any{f.key: value})
		if err != nil {
			return nil, fmt.Errorf("render %s: %w", f.key, err)
		}
		buf.WriteString("\n")
		writeDoc(&buf, f.key, f.help+".")
		fmt.Fprintf(&buf, "# Env %s, flag --%s.\n", f.env, f.flag)
		buf.Write(line)
	}
	buf.WriteString("\n")
	writeDoc(&buf, "runtimes", "OCI runtime handlers: [runtimes.<handler>] with path and root.")
	buf.WriteString("# Env CRIJOURNAL_RUNTIMES_<HANDLER>_PATH and _ROOT.\n")
	runtimes := c.Runtimes
	if runtimes == nil {
		runtimes = map[string]Runtime{}
	}
	tables, err := toml.Marshal(map[string]any{"runtimes": runtimes})
	if err != nil {
		return nil, fmt.Errorf("render runtimes: %w", err)
	}
	buf.Write(tables)
	buf.WriteString("\n")
	writeDoc(&buf, "registries", "Pull mirrors added on top of registries_conf: [[registries]] with prefix, location and insecure.")
	buf.WriteString("# Each: prefix (an image name prefix such as \"registry.k8s.io\" or\n")
	buf.WriteString("# \"docker.io/library\"), location (host[:port][/path], no scheme) and insecure\n")
	buf.WriteString("# (plain HTTP, no TLS verification). File only: no environment variable or flag.\n")
	if len(c.Registries) > 0 {
		tables, err := toml.Marshal(map[string]any{"registries": c.Registries})
		if err != nil {
			return nil, fmt.Errorf("render registries: %w", err)
		}
		buf.Write(tables)
	}
	return buf.Bytes(), nil
}

// writeDoc writes the documentation of key (its field's doc comment) as TOML comments, or
// fallback when it has none.
func writeDoc(buf *bytes.Buffer, key, fallback string) {
	lines := keyDocs()[key]
	if len(lines) == 0 && fallback != "" {
		lines = []string{fallback}
	}
	for _, l := range lines {
		if l == "" {
			buf.WriteString("#\n")
			continue
		}
		buf.WriteString("# " + l + "\n")
	}
}

// A field is one scalar key of Config: any field but Runtimes and
// Registries.
type field struct {
	key   string // TOML key: cache_ttl
	flag  string // flag name: cache-ttl
	env   string // environment variable: CRIJOURNAL_CACHE_TTL
	help  string
	index int // index of the field in Config
}

// scalarFields lists the scalar keys of Config in declaration order.
var scalarFields = func() []field {
	var fields []field
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		sf := t.Field(i)
		key := sf.Tag.Get("toml")
		if key == "runtimes" || key == "registries" {
			continue
		}
		fields = append(fields, field{
			key:   key,
			flag:  strings.ReplaceAll(key, "_", "-"),
			env:   envName(key),
			help:  sf.Tag.Get("help"),
			index: i,
		})
	}
	return fields
}()

// envName returns the environment variable of a (possibly nested) key.
func envName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(envReplacer.Replace(key))
}

var envReplacer = strings.NewReplacer(".", "_", "-", "_")

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
