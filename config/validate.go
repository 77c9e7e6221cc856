package config

// What a valid configuration holds: the values some keys take, and Validate, which checks
// every key and reports every invalid one.

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/crijournal/crijournal/storage/pinned"
)

// Cgroup managers (drivers) of CgroupManager.
const (
	CgroupManagerCgroupfs = "cgroupfs"
	CgroupManagerSystemd  = "systemd"
)

var (
	logLevels      = []string{"debug", "info", "warn", "error"}
	logFormats     = []string{"text", "json"}
	storageDrivers = []string{"", "overlay", "vfs"}
)

// PodMetricGroups are the groups of included_pod_metrics, in the order of CRI-O's
// documentation; PodMetricsAll stands for all of them.
var PodMetricGroups = []string{"cpu", "disk", "diskIO", "memory", "network", "oom", "process", "spec"}

// PodMetricsAll, as the only element of included_pod_metrics, includes every group.
const PodMetricsAll = "all"

var (
	// handlerName is a DNS-1123 label, what Kubernetes allows as a
	// RuntimeClass handler.
	handlerName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// MinLogSizeMax is the least positive log_size_max: conmon reads a container's output
// 8 KiB at a time, and a bound below that would truncate the log at every read.
const MinLogSizeMax = 8192

// maxSocketPath is the longest path a unix socket address can hold
// (sun_path is 108 bytes, with a terminating NUL).
const maxSocketPath = 107

// Validate reports every invalid value in c, each as a *KeyError, joined
// with errors.Join; it returns nil when c is valid.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &KeyError{Key: key, Err: fmt.Errorf(format, args...)})
	}
	absolute := func(key, path string, required bool) {
		switch {
		case path == "" && required:
			bad(key, "must be set to an absolute path")
		case path != "" && !filepath.IsAbs(path):
			bad(key, "must be an absolute path, got %q", path)
		}
	}
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, "must be a positive duration, got %v", d)
		}
	}
	oneOf := func(key, value string, allowed []string) {
		if !slices.Contains(allowed, value) {
			bad(key, "must be one of %s, got %q", quoteList(allowed), value)
		}
	}

	absolute("root", c.Root, true)
	absolute("run_root", c.RunRoot, true)
	absolute("journal_path", c.JournalPath, false)
	absolute("socket", c.Socket, true)
	if len(c.Socket) > maxSocketPath {
		bad("socket", "is %d bytes long, a unix socket path can have at most %d", len(c.Socket), maxSocketPath)
	}
	absolute("namespace_dir", c.NamespaceDir, true)
	absolute("cni_conf_dir", c.CNIConfDir, true)
	if len(c.CNIPluginDirs) == 0 {
		bad("cni_plugin_dirs", "must list at least one directory")
	}
	for _, dir := range c.CNIPluginDirs {
		absolute("cni_plugin_dirs", dir, true)
	}
	absolute("cni_cache_dir", c.CNICacheDir, false)

	positive("network_timeout", c.NetworkTimeout)
	positive("cache_ttl", c.CacheTTL)
	positive("cache_sweep_interval", c.CacheSweepInterval)
	positive("stats_collect_period", c.StatsCollectPeriod)
	for _, g := range c.IncludedPodMetrics {
		if g == PodMetricsAll && len(c.IncludedPodMetrics) > 1 {
			bad("included_pod_metrics", "%q must be the only element", PodMetricsAll)
		} else if g != PodMetricsAll {
			oneOf("included_pod_metrics", g, PodMetricGroups)
		}
	}
	if c.ImagePullProgressTimeout < 0 {
		bad("image_pull_progress_timeout", "must be 0 (no timeout) or a positive duration, got %v", c.ImagePullProgressTimeout)
	}
	positive("undo_retry_min", c.UndoRetryMin)
	positive("undo_retry_max", c.UndoRetryMax)
	positive("undo_timeout", c.UndoTimeout)
	positive("exec_drain_timeout", c.ExecDrainTimeout)
	if c.ExecSyncMaxConcurrent < 1 {
		bad("exec_sync_max_concurrent", "must be at least 1, got %d", c.ExecSyncMaxConcurrent)
	}
	if c.UndoRetryMin > 0 && c.UndoRetryMax > 0 && c.UndoRetryMax < c.UndoRetryMin {
		bad("undo_retry_max", "must not be below undo_retry_min (%v), got %v", c.UndoRetryMin, c.UndoRetryMax)
	}
	positive("journal_lock_timeout", c.JournalLockTimeout)
	if c.JournalReserveMiB < 0 || c.JournalReserveMiB > MaxJournalReserveMiB {
		bad("journal_reserve_mib", "must be between 0 (off) and %d, got %d", MaxJournalReserveMiB, c.JournalReserveMiB)
	}

	oneOf("log_level", c.LogLevel, logLevels)
	oneOf("log_format", c.LogFormat, logFormats)
	if c.MetricsAddress != "" {
		if _, port, err := net.SplitHostPort(c.MetricsAddress); err != nil {
			bad("metrics_address", "must be host:port or empty: %v", err)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			bad("metrics_address", "has an invalid port %q", port)
		}
	}

	if c.PprofAddress != "" {
		host, port, err := net.SplitHostPort(c.PprofAddress)
		switch {
		case err != nil:
			bad("pprof_address", "must be host:port or empty: %v", err)
		case !loopbackHost(host):
			bad("pprof_address", "must be a loopback address (127.0.0.1, [::1] or localhost), got host %q", host)
		default:
			if _, err := strconv.ParseUint(port, 10, 16); err != nil {
				bad("pprof_address", "has an invalid port %q", port)
			}
		}
	}

	if err := ValidateTracingEndpoint(c.TracingEndpoint); err != nil {
		bad("tracing_endpoint", "%v", err)
	}
	if r := c.TracingSamplingRatePerMillion; r < 0 || r > MaxTracingSamplingRatePerMillion {
		bad("tracing_sampling_rate_per_million", "must be between 0 (follow callers only) and %d (sample every trace), got %d", MaxTracingSamplingRatePerMillion, r)
	}

	oneOf("storage_driver", c.StorageDriver, storageDrivers)
	absolute("storage_root", c.StorageRoot, false)
	absolute("storage_run_root", c.StorageRunRoot, false)
	absolute("image_store", c.ImageStore, false)
	if c.ImageStore != "" && filepath.Clean(c.ImageStore) == filepath.Clean(c.Layout().StorageRootDir()) {
		bad("image_store", "must differ from the storage root %s (empty: no split)", c.Layout().StorageRootDir())
	}
	if _, err := pinned.Parse(c.PinnedImages); err != nil {
		bad("pinned_images", "%v", err)
	}

	for _, name := range sortedKeys(c.Runtimes) {
		rt := c.Runtimes[name]
		if !handlerName.MatchString(name) {
			bad("runtimes."+name, "handler name must be a lower-case DNS label (a-z, 0-9, '-'), got %q", name)
			continue
		}
		absolute("runtimes."+name+".path", rt.Path, false)
		absolute("runtimes."+name+".root", rt.Root, false)
	}
	if _, ok := c.Runtimes[c.DefaultRuntime]; !ok {
		bad("default_runtime", "must name a handler of runtimes (%s), got %q", quoteList(sortedKeys(c.Runtimes)), c.DefaultRuntime)
	}
	if c.LogSizeMax > 0 && c.LogSizeMax < MinLogSizeMax {
		bad("log_size_max", "must be 0 (automatic), negative (no bound) or at least %d (conmon's read buffer), got %d", MinLogSizeMax, c.LogSizeMax)
	}
	absolute("conmon_path", c.ConmonPath, false)
	absolute("pause_path", c.PausePath, false)
	for _, dir := range c.CDISpecDirs {
		absolute("cdi_spec_dirs", dir, true)
	}

	if c.StreamAddress != "" && strings.ContainsAny(c.StreamAddress, " /") {
		bad("stream_address", "must be a host name or IP address, got %q", c.StreamAddress)
	}
	if _, err := strconv.ParseUint(c.StreamPort, 10, 16); err != nil {
		bad("stream_port", "must be a port number (0 to 65535), got %q", c.StreamPort)
	}
	errs = append(errs, validateRegistries(c.Registries)...)
	absolute("registries_conf", c.RegistriesConf, false)
	absolute("registries_conf_dir", c.RegistriesConfDir, false)
	absolute("signature_policy", c.SignaturePolicy, true)
	absolute("global_auth_file", c.GlobalAuthFile, false)
	absolute("metrics_cert", c.MetricsCert, false)
	absolute("metrics_key", c.MetricsKey, false)
	if (c.MetricsCert == "") != (c.MetricsKey == "") {
		bad("metrics_cert", "metrics_cert and metrics_key must be set together")
	}
	absolute("stream_tls_cert", c.StreamTLSCert, false)
	absolute("stream_tls_key", c.StreamTLSKey, false)
	if (c.StreamTLSCert == "") != (c.StreamTLSKey == "") {
		bad("stream_tls_key", "stream_tls_cert and stream_tls_key must be set together (got %q and %q)", c.StreamTLSCert, c.StreamTLSKey)
	}
	switch c.CgroupManager {
	case CgroupManagerCgroupfs:
	case CgroupManagerSystemd:
	default:
		bad("cgroup_manager", "must be %q or %q, got %q", CgroupManagerCgroupfs, CgroupManagerSystemd, c.CgroupManager)
	}
	if c.EnableNRI {
		absolute("nri_listen", c.NRIListen, !c.NRIDisableConnections)
		if len(c.NRIListen) > maxSocketPath {
			bad("nri_listen", "is %d bytes long, a unix socket path can have at most %d", len(c.NRIListen), maxSocketPath)
		}
		absolute("nri_plugin_dir", c.NRIPluginDir, false)
		absolute("nri_plugin_config_dir", c.NRIPluginConfigDir, false)
		positive("nri_plugin_registration_timeout", c.NRIPluginRegistrationTimeout)
		positive("nri_plugin_request_timeout", c.NRIPluginRequestTimeout)
	}
	return errors.Join(errs...)
}

// validateRegistries checks every [[registries]] entry: prefix and location
// set, without a scheme or spaces, and no prefix given twice.
func validateRegistries(regs []Registry) []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &KeyError{Key: key, Err: fmt.Errorf(format, args...)})
	}
	seen := map[string]int{}
	for i, r := range regs {
		key := fmt.Sprintf("registries[%d]", i)
		for _, f := range []struct{ name, value string }{{"prefix", r.Prefix}, {"location", r.Location}} {
			switch {
			case f.value == "":
				bad(key+"."+f.name, "must be set")
			case strings.Contains(f.value, "://"):
				hint := ""
				if f.name == "location" {
					hint = "; for plain HTTP (or HTTPS without certificate verification) set insecure = true"
				}
				bad(key+"."+f.name, "must be host[:port][/path] without a scheme, got %q%s", f.value, hint)
			case strings.ContainsAny(f.value, " \t\n") || strings.HasPrefix(f.value, "/"):
				bad(key+"."+f.name, "must be host[:port][/path], got %q", f.value)
			}
		}
		if j, dup := seen[r.Prefix]; dup && r.Prefix != "" {
			bad(key+".prefix", "%q is already the prefix of registries[%d]", r.Prefix, j)
		}
		seen[r.Prefix] = i
	}
	return errs
}

func quoteList(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = strconv.Quote(v)
	}
	return strings.Join(quoted, ", ")
}

// MaxTracingSamplingRatePerMillion is the largest tracing_sampling_rate_per_million:
// every trace sampled.
const MaxTracingSamplingRatePerMillion = 1_000_000

// ValidateTracingEndpoint says what is wrong with a tracing_endpoint: it must be
// host:port, http://host:port or https://host:port ("" is valid: off).
func ValidateTracingEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	hostPort := endpoint
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			return fmt.Errorf("not a URL: %w", err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("scheme %q: want http:// (plain gRPC), https:// (gRPC over TLS) or none (host:port, plain), got %q", u.Scheme, endpoint)
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
			return fmt.Errorf("want scheme://host:port and nothing more, got %q", endpoint)
		}
		hostPort = u.Host
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return fmt.Errorf("want host:port, http://host:port or https://host:port, got %q", endpoint)
	}
	if host == "" {
		return fmt.Errorf("no host in %q", endpoint)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("invalid port %q in %q", port, endpoint)
	}
	return nil
}

// loopbackHost reports whether host names a loopback address: "localhost" or a
// loopback IP.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// PodMetrics returns the groups of included_pod_metrics, "all" expanded.
func (c Config) PodMetrics() []string {
	if len(c.IncludedPodMetrics) == 1 && c.IncludedPodMetrics[0] == PodMetricsAll {
		return slices.Clone(PodMetricGroups)
	}
	return slices.Clone(c.IncludedPodMetrics)
}
