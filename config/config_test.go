package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

// clearEnv removes every CRIJOURNAL_* variable for the duration of the test,
// so the developer's environment cannot change the results.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix+"_") {
			t.Setenv(name, "") // restores the old value after the test
			os.Unsetenv(name)
		}
	}
}

// writeFile writes a configuration file in a temporary directory and
// returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "crijournal.toml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// parseFlags returns a flag set from BindFlags after parsing args.
func parseFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

// source is one layered input of a test: a file, environment and flags.
type source struct {
	file  string            // contents of the configuration file; "" means no file
	env   map[string]string // environment variables
	flags []string          // command-line arguments
}

// loadSource loads the configuration described by s. With no file, it loads
// as from a default path that does not exist.
func loadSource(t *testing.T, s source) (Config, error) {
	t.Helper()
	clearEnv(t)
	for k, v := range s.env {
		t.Setenv(k, v)
	}
	path, mustExist := filepath.Join(t.TempDir(), "missing.toml"), false
	if s.file != "" {
		path, mustExist = writeFile(t, s.file), true
	}
	return load(path, mustExist, parseFlags(t, s.flags...))
}

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	l := c.Layout()
	for _, tc := range []struct{ name, got, want string }{
		{"JournalFile", l.JournalFile(), "/var/lib/crijournal/journal.db"},
		{"StorageRootDir", l.StorageRootDir(), "/var/lib/crijournal/storage"},
		{"StorageRunRootDir", l.StorageRunRootDir(), "/run/crijournal/storage"},
		{"ImageCacheDir", l.ImageCacheDir(), "/var/lib/crijournal/image-cache"},
		{"RuntimeRoot(runc)", l.RuntimeRoot("runc"), "/run/crijournal/runc"},
		{"RuntimeRoot(crun)", l.RuntimeRoot("crun"), "/run/crijournal/crun"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	c.JournalPath, c.StorageRoot, c.StorageRunRoot = "/j.db", "/s", "/sr"
	l = c.Layout()
	if l.JournalFile() != "/j.db" || l.StorageRootDir() != "/s" || l.StorageRunRootDir() != "/sr" {
		t.Errorf("explicit paths not returned: %q %q %q", l.JournalFile(), l.StorageRootDir(), l.StorageRunRootDir())
	}

	// Default() must return a fresh value each time.
	a, b := Default(), Default()
	a.CNIPluginDirs[0] = "/changed"
	a.Runtimes["runc"] = Runtime{Path: "/changed"}
	if diff := cmp.Diff(Default(), b); diff != "" {
		t.Errorf("Default() shares state between calls (-want +got):\n%s", diff)
	}
}

func TestLoadDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  source
	}{
		{"missing default file", source{}},
		{"empty file", source{file: "# nothing\n"}},
		{"unrelated env", source{env: map[string]string{"CRIJOURNAL_BIN": "/x", "OTHER": "y"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadSource(t, tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Default(), got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadMissingExplicitFile(t *testing.T) {
	clearEnv(t)
	path := filepath.Join(t.TempDir(), "nope.toml")
	_, err := Load(path, nil)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Load(%q) = %v, want a not-exist error naming the file", path, err)
	}
}

func TestLoadLayers(t *testing.T) {
	const file = `
root = "/srv/cj"
cache_ttl = "3m"
log_level = "debug"
cni_plugin_dirs = ["/a"]
journal_no_sync = true
journal_reserve_mib = 8
exec_sync_max_concurrent = 7

[runtimes.runc]
path = "/usr/sbin/runc"

[runtimes.crun]
path = "/usr/bin/crun"
`
	for _, tc := range []struct {
		name string
		src  source
		want func(*Config)
	}{
		{
			name: "file overrides default",
			src:  source{file: file},
			want: func(c *Config) {
				c.Root = "/srv/cj"
				c.CacheTTL = 3 * time.Minute
				c.LogLevel = "debug"
				c.CNIPluginDirs = []string{"/a"}
				c.JournalNoSync = true
				c.JournalReserveMiB = 8
				c.ExecSyncMaxConcurrent = 7
				c.Runtimes = map[string]Runtime{
					"runc": {Path: "/usr/sbin/runc", Root: "/run/crijournal/runc"},
					"crun": {Path: "/usr/bin/crun"},
				}
			},
		},
		{
			name: "env overrides file",
			src: source{file: file, env: map[string]string{
				"CRIJOURNAL_CACHE_TTL":                "4m",
				"CRIJOURNAL_CNI_PLUGIN_DIRS":          "/b, /c",
				"CRIJOURNAL_JOURNAL_NO_SYNC":          "false",
				"CRIJOURNAL_JOURNAL_RESERVE_MIB":      "0",
				"CRIJOURNAL_RUNTIMES_CRUN_ROOT":       "/run/crun",
				"CRIJOURNAL_RUNTIMES_RUNC_PATH":       "/opt/runc",
				"CRIJOURNAL_EXEC_SYNC_MAX_CONCURRENT": "8",
			}},
			want: func(c *Config) {
				c.Root = "/srv/cj"
				c.CacheTTL = 4 * time.Minute
				c.LogLevel = "debug"
				c.CNIPluginDirs = []string{"/b", "/c"}
				c.JournalReserveMiB = 0
				c.ExecSyncMaxConcurrent = 8
				c.Runtimes = map[string]Runtime{
					"runc": {Path: "/opt/runc", Root: "/run/crijournal/runc"},
					"crun": {Path: "/usr/bin/crun", Root: "/run/crun"},
				}
			},
		},
		{
			name: "flag overrides env",
			src: source{
				file:  file,
				env:   map[string]string{"CRIJOURNAL_CACHE_TTL": "4m", "CRIJOURNAL_LOG_LEVEL": "warn", "CRIJOURNAL_JOURNAL_RESERVE_MIB": "4", "CRIJOURNAL_EXEC_SYNC_MAX_CONCURRENT": "8"},
				flags: []string{"--cache-ttl=5m", "--cni-plugin-dirs=/d,/e", "--journal-no-sync=false", "--journal-reserve-mib=2", "--socket", "/tmp/cj.sock", "--exec-sync-max-concurrent=9", "--log-size-max=65536"},
			},
			want: func(c *Config) {
				c.Root = "/srv/cj"
				c.CacheTTL = 5 * time.Minute
				c.LogLevel = "warn"
				c.CNIPluginDirs = []string{"/d", "/e"}
				c.JournalReserveMiB = 2
				c.Socket = "/tmp/cj.sock"
				c.ExecSyncMaxConcurrent = 9
				c.LogSizeMax = 65536
				c.Runtimes = map[string]Runtime{
					"runc": {Path: "/usr/sbin/runc", Root: "/run/crijournal/runc"},
					"crun": {Path: "/usr/bin/crun"},
				}
			},
		},
		{
			name: "env without file",
			src: source{env: map[string]string{
				"CRIJOURNAL_METRICS_ADDRESS": "127.0.0.1:9090",
				"CRIJOURNAL_STORAGE_DRIVER":  "vfs",
			}},
			want: func(c *Config) {
				c.MetricsAddress = "127.0.0.1:9090"
				c.StorageDriver = "vfs"
			},
		},
		{
			name: "empty env value sets empty",
			src: source{
				file: `metrics_address = "127.0.0.1:9090"`,
				env:  map[string]string{"CRIJOURNAL_METRICS_ADDRESS": ""},
			},
			want: func(*Config) {},
		},
		{
			name: "unset flags do not override",
			src:  source{file: `socket = "/run/x.sock"`},
			want: func(c *Config) { c.Socket = "/run/x.sock" },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadSource(t, tc.src)
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tc.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadUnknownKey(t *testing.T) {
	for _, tc := range []struct {
		name, file, key string
	}{
		{"top level typo", "cache_tll = \"1m\"\n", "cache_tll"},
		{"table", "[storage]\ndriver = \"vfs\"\n", "storage"},
		{"wrong case", "Root = \"/x\"\n", "Root"},
		{"runtime key", "[runtimes.runc]\nbinary = \"/x\"\n", "runtimes.runc.binary"},
		{"registry key", "[[registries]]\nprefix = \"a.io\"\nlocation = \"b.io\"\nmirror = \"c.io\"\n", "registries[0].mirror"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.file)
			clearEnv(t)
			_, err := Load(path, nil)
			if !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("Load = %v, want ErrUnknownKey", err)
			}
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != tc.key || ke.Source != path {
				t.Fatalf("Load = %#v, want a KeyError for %q from %q", err, tc.key, path)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.key) || !strings.Contains(msg, path) {
				t.Errorf("error %q does not name the key %q and the file", msg, tc.key)
			}
		})
	}
}

func TestLoadInvalid(t *testing.T) {
	for _, tc := range []struct {
		name   string
		src    source
		key    string // the key the error must name; "" for errors about the whole file
		substr string // more text the error must hold
	}{
		{"bad duration in file", source{file: `cache_ttl = "2 minutes"`}, "cache_ttl", "invalid duration"},
		{"bad duration in env", source{env: map[string]string{"CRIJOURNAL_NETWORK_TIMEOUT": "5"}}, "network_timeout", "CRIJOURNAL_NETWORK_TIMEOUT"},
		{"integer duration", source{file: `cache_ttl = 120`}, "cache_ttl", "integer 120"},
		{"negative ttl", source{file: `cache_ttl = "-1m"`}, "cache_ttl", "positive"},
		{"zero sweep interval", source{env: map[string]string{"CRIJOURNAL_CACHE_SWEEP_INTERVAL": "0s"}}, "cache_sweep_interval", "positive"},
		{"zero stats period", source{file: `stats_collect_period = "0s"`}, "stats_collect_period", "positive"},
		{"unknown metric group", source{file: `included_pod_metrics = ["cpu", "gpu"]`}, "included_pod_metrics", `got "gpu"`},
		{"hugetlb metrics", source{file: `included_pod_metrics = ["hugetlb"]`}, "included_pod_metrics", `got "hugetlb"`},
		{"all and more", source{file: `included_pod_metrics = ["all", "cpu"]`}, "included_pod_metrics", "only element"},
		{"relative image store", source{file: `image_store = "images"`}, "image_store", "absolute"},
		{"image store is the storage root", source{file: "storage_root = \"/srv/s\"\nimage_store = \"/srv/s/\""}, "image_store", "differ from the storage root /srv/s"},
		{"image store is the default storage root", source{env: map[string]string{"CRIJOURNAL_IMAGE_STORE": "/var/lib/crijournal/storage"}}, "image_store", "CRIJOURNAL_IMAGE_STORE"},
		{"short pinned name", source{file: `pinned_images = ["registry.k8s.io/pause:3.10", "busybox:1.36"]`}, "pinned_images", "docker.io/library/busybox:1.36"},
		{"pinned star inside", source{env: map[string]string{"CRIJOURNAL_PINNED_IMAGES": "quay.io/*,quay.io/*/x:1"}}, "pinned_images", "a * may only"},
		{"pinned without tag", source{flags: []string{"--pinned-images=registry.k8s.io/pause"}}, "pinned_images", "no tag and no digest"},
		{"negative ttl flag", source{flags: []string{"--cache-ttl=-5s"}}, "cache_ttl", "flag --cache-ttl"},
		{"undo max below min", source{file: "undo_retry_min = \"10m\"\nundo_retry_max = \"1m\""}, "undo_retry_max", "undo_retry_min"},
		{"relative root", source{file: `root = "var/lib/cj"`}, "root", "absolute"},
		{"empty socket", source{file: `socket = ""`}, "socket", "absolute"},
		{"long socket", source{file: `socket = "/` + strings.Repeat("s", 120) + `"`}, "socket", "at most"},
		{"relative journal path", source{env: map[string]string{"CRIJOURNAL_JOURNAL_PATH": "journal.db"}}, "journal_path", "absolute"},
		{"relative plugin dir", source{file: `cni_plugin_dirs = ["/opt/cni/bin", "bin"]`}, "cni_plugin_dirs", `"bin"`},
		{"no plugin dirs", source{file: `cni_plugin_dirs = []`}, "cni_plugin_dirs", "at least one"},
		{"plugin dirs not strings", source{file: `cni_plugin_dirs = [1]`}, "cni_plugin_dirs", "array of strings"},
		{"log bound of one", source{file: `log_size_max = 1`}, "log_size_max", "at least 8192"},
		{"log bound below conmon's buffer", source{env: map[string]string{"CRIJOURNAL_LOG_SIZE_MAX": "4096"}}, "log_size_max", "CRIJOURNAL_LOG_SIZE_MAX"},
		{"no exec at all", source{file: `exec_sync_max_concurrent = 0`}, "exec_sync_max_concurrent", "at least 1"},
		{"exec cap as float", source{file: `exec_sync_max_concurrent = 1.5`}, "exec_sync_max_concurrent", "float 1.5"},
		{"exec cap env", source{env: map[string]string{"CRIJOURNAL_EXEC_SYNC_MAX_CONCURRENT": "many"}}, "exec_sync_max_concurrent", "CRIJOURNAL_EXEC_SYNC_MAX_CONCURRENT"},
		{"relative CDI spec dir", source{file: `cdi_spec_dirs = ["/etc/cdi", "cdi"]`}, "cdi_spec_dirs", `"cdi"`},
		{"relative CDI spec dir in env", source{env: map[string]string{"CRIJOURNAL_CDI_SPEC_DIRS": "/etc/cdi,var/cdi"}}, "cdi_spec_dirs", "CRIJOURNAL_CDI_SPEC_DIRS"},
		{"relative runtime path", source{file: "[runtimes.runc]\npath = \"runc\""}, "runtimes.runc.path", "absolute"},
		{"unknown log level", source{file: `log_level = "verbose"`}, "log_level", `"verbose"`},
		{"unknown log format", source{env: map[string]string{"CRIJOURNAL_LOG_FORMAT": "xml"}}, "log_format", "text"},
		{"unknown storage driver", source{file: `storage_driver = "btrfs"`}, "storage_driver", "overlay"},
		{"bad metrics address", source{file: `metrics_address = "9090"`}, "metrics_address", "host:port"},
		{"pprof without port", source{file: `pprof_address = "127.0.0.1"`}, "pprof_address", "host:port"},
		{"pprof on all addresses", source{file: `pprof_address = ":6060"`}, "pprof_address", "loopback"},
		{"pprof on a node address", source{env: map[string]string{"CRIJOURNAL_PPROF_ADDRESS": "10.0.0.1:6060"}}, "pprof_address", "loopback"},
		{"pprof bad port", source{flags: []string{"--pprof-address=127.0.0.1:http"}}, "pprof_address", "port"},
		{"metrics cert without key", source{file: `metrics_cert = "/etc/m.crt"`}, "metrics_cert", "together"},
		{"tracing endpoint without port", source{file: `tracing_endpoint = "127.0.0.1"`}, "tracing_endpoint", "host:port"},
		{"tracing endpoint without host", source{env: map[string]string{"CRIJOURNAL_TRACING_ENDPOINT": ":4317"}}, "tracing_endpoint", "no host"},
		{"tracing endpoint bad port", source{flags: []string{"--tracing-endpoint=collector:otlp"}}, "tracing_endpoint", `invalid port "otlp"`},
		{"tracing endpoint port zero", source{file: `tracing_endpoint = "127.0.0.1:0"`}, "tracing_endpoint", `invalid port "0"`},
		{"tracing endpoint unix scheme", source{file: `tracing_endpoint = "unix:///run/otel.sock"`}, "tracing_endpoint", `scheme "unix"`},
		{"tracing endpoint with a path", source{file: `tracing_endpoint = "http://127.0.0.1:4318/v1/traces"`}, "tracing_endpoint", "nothing more"},
		{"negative sampling rate", source{file: `tracing_sampling_rate_per_million = -1`}, "tracing_sampling_rate_per_million", "between 0 (follow callers only) and 1000000"},
		{"sampling rate above a million", source{env: map[string]string{"CRIJOURNAL_TRACING_SAMPLING_RATE_PER_MILLION": "1000001"}}, "tracing_sampling_rate_per_million", "got 1000001"},
		{"sampling rate as a ratio", source{file: `tracing_sampling_rate_per_million = 0.5`}, "tracing_sampling_rate_per_million", "float 0.5"},
		{"relative signature policy", source{file: `signature_policy = "policy.json"`}, "signature_policy", "absolute"},
		{"no signature policy", source{file: `signature_policy = ""`}, "signature_policy", "must be set"},
		{"relative registries.conf", source{file: `registries_conf = "registries.conf"`}, "registries_conf", "absolute"},
		{"bad stream port", source{file: `stream_port = "http"`}, "stream_port", "port"},
		{"integer stream port", source{file: `stream_port = 10010`}, "stream_port", "want a string"},
		{"stream cert without key", source{file: `stream_tls_cert = "/etc/cj/stream.crt"`}, "stream_tls_key", "together"},
		{"relative stream key", source{file: "stream_tls_cert = \"/etc/cj/s.crt\"\nstream_tls_key = \"s.key\""}, "stream_tls_key", "absolute"},
		{"unknown cgroup manager", source{file: `cgroup_manager = "cgroupv2"`}, "cgroup_manager", `must be "cgroupfs" or "systemd"`},
		{"bad bool env", source{env: map[string]string{"CRIJOURNAL_JOURNAL_NO_SYNC": "maybe"}}, "journal_no_sync", "true or false"},
		{"negative journal reserve", source{file: `journal_reserve_mib = -1`}, "journal_reserve_mib", "between 0 (off) and 1024"},
		{"negative pull progress timeout", source{flags: []string{"--image-pull-progress-timeout=-1s"}}, "image_pull_progress_timeout", "0 (no timeout) or a positive"},
		{"huge journal reserve", source{flags: []string{"--journal-reserve-mib=4096"}}, "journal_reserve_mib", "got 4096"},
		{"journal reserve with a unit", source{env: map[string]string{"CRIJOURNAL_JOURNAL_RESERVE_MIB": "16MiB"}}, "journal_reserve_mib", "want an integer"},
		{"fractional journal reserve", source{file: `journal_reserve_mib = 1.5`}, "journal_reserve_mib", "float 1.5"},
		{"unknown default runtime", source{file: `default_runtime = "kata"`}, "default_runtime", `"runc"`},
		{"bad handler name", source{file: "[runtimes.Kata_QEMU]\npath = \"/usr/bin/kata\""}, "runtimes.Kata_QEMU", "DNS label"},
		{"runtime not a table", source{file: "[runtimes]\nrunc = \"/usr/sbin/runc\""}, "runtimes.runc", "table"},
		{"syntax error", source{file: "root = /var/lib\n"}, "", ":1:"},
		{"registry with scheme", source{file: "[[registries]]\nprefix = \"registry.k8s.io\"\nlocation = \"http://127.0.0.1:5000\"\n"}, "registries[0].location", "insecure = true"},
		{"registry prefix with scheme", source{file: "[[registries]]\nprefix = \"https://registry.k8s.io\"\nlocation = \"127.0.0.1:5000\"\n"}, "registries[0].prefix", "without a scheme"},
		{"registry without location", source{file: "[[registries]]\nprefix = \"registry.k8s.io\"\n"}, "registries[0].location", "must be set"},
		{"registry without prefix", source{file: "[[registries]]\nlocation = \"127.0.0.1:5000\"\n"}, "registries[0].prefix", "must be set"},
		{"registry prefix twice", source{file: "[[registries]]\nprefix = \"a.io\"\nlocation = \"b.io\"\n[[registries]]\nprefix = \"a.io\"\nlocation = \"c.io\"\n"}, "registries[1].prefix", "registries[0]"},
		{"registry insecure not bool", source{file: "[[registries]]\nprefix = \"a.io\"\nlocation = \"b.io\"\ninsecure = \"yes\"\n"}, "registries[0].insecure", "true or false"},
		{"registry location not string", source{file: "[[registries]]\nprefix = \"a.io\"\nlocation = 5000\n"}, "registries[0].location", "want a string"},
		{"registries not tables", source{file: "registries = [\"a.io\"]\n"}, "registries[0]", "table"},
		{"registries a table", source{file: "[registries]\nprefix = \"a.io\"\n"}, "registries", "array of tables"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadSource(t, tc.src)
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.substr) {
				t.Errorf("error %q does not contain %q", msg, tc.substr)
			}
			if tc.key == "" {
				return
			}
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != tc.key {
				t.Errorf("error %q is not a KeyError for %q", msg, tc.key)
			}
			if !strings.HasPrefix(msg, tc.key+": ") {
				t.Errorf("error %q does not start with the key %q", msg, tc.key)
			}
		})
	}
}

func TestLoadReportsEveryError(t *testing.T) {
	_, err := loadSource(t, source{file: "log_level = \"loud\"\nlog_format = \"xml\"\nroot = \"rel\"\n"})
	for _, key := range []string{"log_level", "log_format", "root"} {
		if err == nil || !strings.Contains(err.Error(), key+": ") {
			t.Errorf("error %v does not report %s", err, key)
		}
	}
}

func TestTOMLRoundTrip(t *testing.T) {
	custom := Config{
		Root:                          "/srv/crijournal",
		RunRoot:                       "/run/cj",
		JournalPath:                   "/srv/journal \"quoted\".db",
		Socket:                        "/run/cj/cj.sock",
		NamespaceDir:                  "/run/cj/ns",
		CNIConfDir:                    "/etc/cni/conf",
		CNIPluginDirs:                 []string{"/opt/cni/bin"},
		CNICacheDir:                   "/var/cache/cni",
		NetworkTimeout:                7*time.Minute + 30*time.Second,
		CacheTTL:                      90 * time.Second,
		CacheSweepInterval:            1500 * time.Millisecond,
		StatsCollectPeriod:            30 * time.Second,
		IncludedPodMetrics:            []string{"cpu", "memory", "network"},
		UndoRetryMin:                  250 * time.Millisecond,
		UndoRetryMax:                  time.Hour,
		UndoTimeout:                   30 * time.Second,
		ExecDrainTimeout:              5 * time.Second,
		JournalLockTimeout:            3 * time.Second,
		JournalReserveMiB:             64,
		JournalNoSync:                 true,
		LogLevel:                      "debug",
		LogFormat:                     "json",
		MetricsAddress:                "[::1]:9090",
		PprofAddress:                  "127.0.0.1:6060",
		TracingEndpoint:               "https://otel-collector.example:4317",
		TracingSamplingRatePerMillion: 250,
		StorageDriver:                 "vfs",
		StorageRoot:                   "/srv/storage",
		StorageRunRoot:                "/run/storage",
		ImageStore:                    "/srv/images",
		ImagePullProgressTimeout:      90 * time.Second,
		PinnedImages:                  []string{"registry.k8s.io/pause:3.10", "quay.io/myorg/*", "*agent*"},
		DefaultRuntime:                "crun",
		Runtimes: map[string]Runtime{
			"runc": {Path: "/usr/sbin/runc", Root: "/run/runc"},
			"crun": {Path: "/usr/bin/crun"},
		},
		ConmonPath:    "/usr/bin/conmon",
		PausePath:     "/usr/libexec/crijournal/crijournal-pause",
		CDISpecDirs:   []string{"/etc/cdi", "/srv/cdi"},
		StreamAddress: "0.0.0.0",
		StreamPort:    "10010",
		Registries: []Registry{
			{Prefix: "registry.k8s.io", Location: "127.0.0.1:5000", Insecure: true},
			{Prefix: "docker.io/library", Location: "mirror.example.com:5443/hub"},
		},
		RegistriesConf:    "/srv/containers/registries.conf",
		RegistriesConfDir: "",
		SignaturePolicy:   "/srv/containers/policy.json",
		GlobalAuthFile:    "/etc/crijournal/auth.json",
		MetricsCert:       "/etc/crijournal/metrics.crt",
		MetricsKey:        "/etc/crijournal/metrics.key",
		StreamTLSCert:     "/etc/crijournal/stream.crt",
		StreamTLSKey:      "/etc/crijournal/stream.key",
		CgroupManager:     CgroupManagerSystemd,
	}
	custom.SeccompUnavailable = true
	custom.RefuseVulnerableRuntime = true
	custom.ExecSyncMaxConcurrent = 5
	custom.LogSizeMax = -1
	custom.EnableNRI, custom.NRIListen, custom.NRIPluginDir, custom.NRIPluginConfigDir = false, "/run/cj/nri.sock", "/srv/nri/plugins", "/srv/nri/conf.d"
	custom.NRIPluginRegistrationTimeout, custom.NRIPluginRequestTimeout, custom.NRIDisableConnections = 9*time.Second, 4*time.Second, true
	// custom must set every field to a non-default value, or the test
	// would not show that the field round-trips.
	def, cv := reflect.ValueOf(Default()), reflect.ValueOf(custom)
	for i := range def.NumField() {
		if reflect.DeepEqual(def.Field(i).Interface(), cv.Field(i).Interface()) {
			t.Errorf("custom config leaves %s at its default", def.Type().Field(i).Name)
		}
	}

	for _, tc := range []struct {
		name string
		c    Config
	}{
		{"default", Default()},
		{"custom", custom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := tc.c.TOML()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range scalarFields {
				if !strings.Contains(string(data), "\n"+f.key+" = ") {
					t.Errorf("TOML() has no key %s:\n%s", f.key, data)
				}
			}
			got, err := loadSource(t, source{file: string(data)})
			if err != nil {
				t.Fatalf("Load(TOML()) = %v\n%s", err, data)
			}
			if diff := cmp.Diff(tc.c, got); diff != "" {
				t.Errorf("Load(TOML()) differs (-want +got):\n%s\n%s", diff, data)
			}
		})
	}
}

func TestBindFlags(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	BindFlags(fs)
	for _, f := range scalarFields {
		fl := fs.Lookup(f.flag)
		if fl == nil {
			t.Errorf("no flag --%s for key %s", f.flag, f.key)
			continue
		}
		if !strings.Contains(fl.Usage, f.env) {
			t.Errorf("usage of --%s does not name %s: %q", f.flag, f.env, fl.Usage)
		}
	}
	for _, name := range []string{"cache-ttl", "socket", "log-level", "journal-no-sync", "cni-plugin-dirs"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no flag --%s", name)
		}
	}
	if err := fs.Parse([]string{"--cache-ttl=soon"}); err == nil {
		t.Error("--cache-ttl=soon parsed without error")
	}
}

func TestSlogLevel(t *testing.T) {
	for _, level := range logLevels {
		c := Config{LogLevel: level}
		if got := c.SlogLevel().String(); !strings.EqualFold(got, level) {
			t.Errorf("SlogLevel(%q) = %s", level, got)
		}
	}
}

func TestLoadRegistries(t *testing.T) {
	const file = `
[[registries]]
prefix = "registry.k8s.io"
location = "127.0.0.1:5000"
insecure = true

[[registries]]
prefix = "docker.io/library"
location = "mirror.example.com/hub"
`
	got, err := loadSource(t, source{file: file})
	if err != nil {
		t.Fatal(err)
	}
	want := []Registry{
		{Prefix: "registry.k8s.io", Location: "127.0.0.1:5000", Insecure: true},
		{Prefix: "docker.io/library", Location: "mirror.example.com/hub"},
	}
	if diff := cmp.Diff(want, got.Registries); diff != "" {
		t.Errorf("Registries (-want +got):\n%s", diff)
	}

	// An error about a registry names the file it came from.
	path := writeFile(t, "[[registries]]\nprefix = \"a.io\"\nlocation = \"https://b.io\"\n")
	clearEnv(t)
	_, err = Load(path, nil)
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Key != "registries[0].location" || ke.Source != path {
		t.Fatalf("Load = %v, want a KeyError for registries[0].location from %s", err, path)
	}

	// No entries, or an empty array, mean none.
	for _, f := range []string{"", "registries = []\n"} {
		got, err := loadSource(t, source{file: "root = \"/x\"\n" + f})
		if err != nil {
			t.Fatal(err)
		}
		if got.Registries != nil {
			t.Errorf("file %q: Registries = %#v, want nil", f, got.Registries)
		}
	}
}

func TestRuntimePath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "runc")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, bundled, want string
	}{
		{"configured path wins", "/usr/sbin/runc", exe, "/usr/sbin/runc"},
		{"bundled runc when installed", "", exe, exe},
		{"PATH when the bundled runc is missing", "", filepath.Join(dir, "missing"), ""},
		{"PATH when the bundled runc is not executable", "", plain, ""},
		{"PATH when the bundled runc is a directory", "", dir, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runtimePath(tc.path, tc.bundled); got != tc.want {
				t.Errorf("runtimePath(%q, %q) = %q, want %q", tc.path, tc.bundled, got, tc.want)
			}
		})
	}
}

func TestPodMetrics(t *testing.T) {
	for _, tt := range []struct {
		included, want []string
	}{
		{[]string{}, []string{}},
		{[]string{"network", "cpu"}, []string{"network", "cpu"}},
		{[]string{"all"}, PodMetricGroups},
	} {
		c := Default()
		c.IncludedPodMetrics = tt.included
		if err := c.Validate(); err != nil {
			t.Errorf("included_pod_metrics %q: %v", tt.included, err)
		}
		if got := c.PodMetrics(); !slices.Equal(got, tt.want) {
			t.Errorf("PodMetrics of %q = %q, want %q", tt.included, got, tt.want)
		}
	}
}

func TestValidTracingEndpoints(t *testing.T) {
	for _, endpoint := range []string{"", "127.0.0.1:4317", "localhost:4317", "[::1]:4317", "http://127.0.0.1:4317", "https://otel.example:4317/"} {
		if err := ValidateTracingEndpoint(endpoint); err != nil {
			t.Errorf("tracing_endpoint %q refused: %v", endpoint, err)
		}
	}
}
