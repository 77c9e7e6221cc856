package netns

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestResolvConf pins how a pod's DNS configuration is rendered, and which
// configurations are refused (InvalidArgument at the server's edge).
func TestResolvConf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dns     DNS
		want    string
		invalid string // a part of the error; "" when valid
	}{
		{name: "empty", dns: DNS{}, want: ""},
		{name: "servers only", dns: DNS{Servers: []string{"10.10.10.10", "fd00::53"}},
			want: "nameserver 10.10.10.10\nnameserver fd00::53\n"},
		{name: "critest's", dns: DNS{Servers: []string{"10.10.10.10"}, Searches: []string{"google.com"}, Options: []string{"ndots:8"}},
			want: "search google.com\nnameserver 10.10.10.10\noptions ndots:8\n"},
		{name: "kubelet's cluster first", dns: DNS{Servers: []string{"10.96.0.10"},
			Searches: []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"}, Options: []string{"ndots:5", "edns0"}},
			want: "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5 edns0\n"},
		{name: "searches and options without servers", dns: DNS{Searches: []string{"a.example"}, Options: []string{"rotate"}},
			want: "search a.example\noptions rotate\n"},
		{name: "server not an IP", dns: DNS{Servers: []string{"dns.example"}}, invalid: `DNS server "dns.example"`},
		{name: "server with a port", dns: DNS{Servers: []string{"10.0.0.1:53"}}, invalid: "not an IP address"},
		{name: "empty server", dns: DNS{Servers: []string{""}}, invalid: "DNS server"},
		{name: "search with a newline", dns: DNS{Searches: []string{"a.example\nnameserver 6.6.6.6"}}, invalid: "DNS search domain"},
		{name: "search with a space", dns: DNS{Searches: []string{"a b"}}, invalid: "white space"},
		{name: "empty option", dns: DNS{Options: []string{""}}, invalid: "DNS option"},
		{name: "option with a tab", dns: DNS{Options: []string{"ndots:5\tx"}}, invalid: "DNS option"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.dns.ResolvConf()
			if tc.invalid != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.invalid) {
					t.Fatalf("ResolvConf = %q, %v; want ErrInvalid about %q", got, err, tc.invalid)
				}
				if verr := tc.dns.Validate(); !errors.Is(verr, ErrInvalid) {
					t.Errorf("Validate = %v, want ErrInvalid", verr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("ResolvConf = %q, %v; want %q", got, err, tc.want)
			}
			if tc.dns.IsZero() != (tc.want == "") {
				t.Errorf("IsZero = %v for %+v", tc.dns.IsZero(), tc.dns)
			}
		})
	}
}

// TestPodFileSteps runs the resolv.conf and hostname steps and their undos in
// a temporary directory: the files hold what the pod asked for (a copy of the
// host's resolv.conf without a DNS configuration), the undo removes them and
// the sandbox's directory once empty, and an undo of what is not there (run
// twice, or before the action) succeeds.
func TestPodFileSteps(t *testing.T) {
	dir := t.TempDir()
	id := newSandboxID(t)
	host := filepath.Join(t.TempDir(), "resolv.conf")
	writeFile(t, host, "nameserver 192.0.2.1\n")

	// An undo before the action: nothing there, success.
	if err := RemovePodFile(ResolvConfStep(dir, id, DNS{}, host).Args[ArgPath]); err != nil {
		t.Fatalf("undo before the action: %v", err)
	}
	copied, err := ResolvConfStep(dir, id, DNS{}, host).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(copied); string(b) != "nameserver 192.0.2.1\n" {
		t.Errorf("resolv.conf without a DNS configuration: %q, want the host's", b)
	}
	hostname, err := HostnameStep(dir, id, "web-0").Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(hostname); string(b) != "web-0\n" {
		t.Errorf("hostname file %q", b)
	}
	// Rewritten with a configuration (a step never runs twice; this checks the content).
	if _, err := ResolvConfStep(dir, id, DNS{Servers: []string{"10.0.0.10"}}, host).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(copied); string(b) != "nameserver 10.0.0.10\n" {
		t.Errorf("resolv.conf %q", b)
	}

	if err := RemovePodFile(copied); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(PodFilesDir(dir, id)); err != nil {
		t.Fatalf("the sandbox's directory went with its first file, while the hostname is in it: %v", err)
	}
	for range 2 {
		if err := RemovePodFile(hostname); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(PodFilesDir(dir, id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the sandbox's directory is left after its last file's undo: %v", err)
	}

	// Refused: an invalid configuration or hostname (nothing is written), and an undo
	// of a path that is not a pod file.
	if _, err := ResolvConfStep(dir, id, DNS{Servers: []string{"x"}}, host).Run(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("resolv.conf step with a bad server: %v, want ErrInvalid", err)
	}
	if _, err := HostnameStep(dir, id, "a\nb").Run(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("hostname step with a newline: %v, want ErrInvalid", err)
	}
	if _, err := os.Stat(PodFilesDir(dir, id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused step left the sandbox's directory: %v", err)
	}
	// Look-alikes of the host's files, in a temporary directory (never the real ones):
	// each must be refused and left alone.
	fake := t.TempDir()
	etc, devShm, other := filepath.Join(fake, "etc", "resolv.conf"), filepath.Join(fake, "dev", "shm"), filepath.Join(fake, id, "other")
	for _, p := range []string{etc, devShm, other} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, "keep")
	}
	for _, p := range []string{etc, other, fake + "/" + id + "/x/../hostname", "relative/" + id + "/hostname"} {
		if err := RemovePodFile(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("RemovePodFile(%q) = %v, want ErrInvalid", p, err)
		}
	}
	if err := UnmountShm(devShm); !errors.Is(err, ErrInvalid) {
		t.Errorf("UnmountShm(%q) = %v, want ErrInvalid", devShm, err)
	}
	for _, p := range []string{etc, devShm, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("a refused undo removed %s: %v", p, err)
		}
	}
	if _, err := HostnameStep(dir, "etc", "web").Run(context.Background()); !errors.Is(err, ErrInvalid) {
		t.Errorf("hostname step of sandbox ID %q: %v, want ErrInvalid", "etc", err)
	}
}

// TestShmStep mounts a pod's /dev/shm and undoes it: a tmpfs of 64 MiB, mode
// 1777, nosuid, nodev, noexec; the undo unmounts it and removes the mount point
// and the directory; undoing again, or something never mounted, succeeds.
func TestShmStep(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	id := newSandboxID(t)
	step := ShmStep(dir, id)
	if err := UnmountShm(step.Args[ArgPath]); err != nil {
		t.Fatalf("undo before the action: %v", err)
	}
	path, err := step.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
	if !testenv.IsMountPoint(t, path) || !IsMountPoint(path) {
		t.Fatalf("%s is not a mount point (mountinfo: %v)", path, testenv.IsMountPoint(t, path))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.TMPFS_MAGIC || uint64(st.Blocks)*uint64(st.Bsize) != ShmSize {
		t.Errorf("shm: filesystem type %#x, %d bytes; want tmpfs of %d", st.Type, uint64(st.Blocks)*uint64(st.Bsize), ShmSize)
	}
	want := unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC
	if st.Flags&int64(want) != int64(want) {
		t.Errorf("shm mount flags %#x, want nosuid, nodev and noexec", st.Flags)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&fs.ModeSticky == 0 {
		t.Errorf("shm mode %v, %v; want 1777", fi.Mode(), err)
	}
	for range 2 {
		if err := UnmountShm(path); err != nil {
			t.Fatal(err)
		}
	}
	if testenv.IsMountPoint(t, path) || IsMountPoint(path) {
		t.Errorf("%s is still mounted after the undo", path)
	}
	if _, err := os.Stat(PodFilesDir(dir, id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the sandbox's directory is left after the undo: %v", err)
	}
}

// TestPortMappingsReachPlugin checks, without root, that the attach step hands
// the port mappings to a plugin that declares the portMappings capability, at
// ADD and, from the step's recorded arguments alone (libcni's cache gone), at
// DEL.
func TestPortMappingsReachPlugin(t *testing.T) {
	plugin := writePlugin(t, "fakeport", `cat > "$(dirname "$0")/stdin.$CNI_COMMAND"
if [ "$CNI_COMMAND" = ADD ]; then
echo '{"cniVersion":"1.0.0","ips":[{"address":"10.1.2.3/24"}]}'
fi
`)
	confDir := t.TempDir()
	writeFile(t, filepath.Join(confDir, "a.conflist"),
		`{"cniVersion":"1.0.0","name":"ports","plugins":[{"type":"fakeport","capabilities":{"portMappings":true}}]}`)
	networks := &Networks{ConfDir: confDir, PluginDirs: []string{filepath.Dir(plugin)}, CacheDir: filepath.Join(t.TempDir(), "cache")}
	n, err := networks.Network()
	if err != nil {
		t.Fatal(err)
	}
	id := newSandboxID(t)
	ports := []PortMapping{{HostPort: 12000, ContainerPort: 80, Protocol: "tcp"}, {HostPort: 5353, ContainerPort: 53, Protocol: "udp", HostIP: "127.0.0.1"}}
	step := AttachStep(n, id, filepath.Join(t.TempDir(), "netns"), "", Pod{Name: "web"}, ports)
	if _, err := step.Run(context.Background()); err != nil {
		t.Fatalf("attach: %v", err)
	}
	if err := os.RemoveAll(n.cacheDir); err != nil {
		t.Fatal(err)
	}
	if err := DetachStep(context.Background(), networks, step.Args, true); err != nil {
		t.Fatalf("detach: %v", err)
	}
	for _, cmd := range []string{"ADD", "DEL"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(plugin), "stdin."+cmd))
		if err != nil {
			t.Fatal(err)
		}
		var conf struct {
			RuntimeConfig struct {
				PortMappings []PortMapping `json:"portMappings"`
			} `json:"runtimeConfig"`
		}
		if err := json.Unmarshal(b, &conf); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(conf.RuntimeConfig.PortMappings, ports) {
			t.Errorf("%s: the plugin got port mappings %+v, want %+v (stdin %s)", cmd, conf.RuntimeConfig.PortMappings, ports, b)
		}
	}

	// Bad mappings are refused before CNI runs.
	for _, bad := range []PortMapping{{HostPort: 0, ContainerPort: 80, Protocol: "tcp"}, {HostPort: 80, ContainerPort: 70000, Protocol: "tcp"},
		{HostPort: 80, ContainerPort: 80, Protocol: "icmp"}, {HostPort: 80, ContainerPort: 80, Protocol: "tcp", HostIP: "localhost"}} {
		if err := ValidatePortMappings([]PortMapping{bad}); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidatePortMappings(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}
