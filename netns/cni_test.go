package netns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
)

// subnetSeq makes the subnets of one test run distinct; the random start
// keeps concurrent runs apart.
var subnetSeq atomic.Uint32

func init() { subnetSeq.Store(rand.Uint32N(200)) }

// testNet is a bridge network in a temp dir: configuration, host-local data
// directory and libcni cache all inside it.
type testNet struct {
	*Network
	confDir, cacheDir, dataDir string
	bridge                     string
	subnet                     *net.IPNet
}

// newTestNet writes a bridge + host-local network configuration with a
// bridge name and a 10.88.x.0/24 subnet unique to the test, loads it, and
// deletes the bridge when the test ends.
func newTestNet(t *testing.T, pluginDir string) *testNet {
	t.Helper()
	dir := t.TempDir()
	tn := &testNet{
		confDir:  filepath.Join(dir, "net.d"),
		cacheDir: filepath.Join(dir, "cache"),
		dataDir:  filepath.Join(dir, "ipam"),
		bridge:   "cjt" + randomHex(t, 4),
	}
	_, tn.subnet, _ = net.ParseCIDR(fmt.Sprintf("10.88.%d.0/24", 10+subnetSeq.Add(1)%240))
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "crijournal-test-" + tn.bridge,
		"plugins": []any{map[string]any{
			"type":      "bridge",
			"bridge":    tn.bridge,
			"isGateway": false, // would turn on the host's ip_forward
			"ipMasq":    false, // would add iptables rules to the host
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": tn.subnet.String()}}},
				"dataDir": tn.dataDir,
			},
		}},
	}
	writeJSON(t, filepath.Join(tn.confDir, "10-test.conflist"), conf)
	t.Cleanup(func() {
		if link, err := netlink.LinkByName(tn.bridge); err == nil {
			if err := netlink.LinkDel(link); err != nil {
				t.Errorf("cleanup: delete bridge %s: %v", tn.bridge, err)
			}
		}
	})
	n, err := LoadNetwork(tn.confDir, []string{pluginDir}, tn.cacheDir)
	if err != nil {
		t.Fatalf("LoadNetwork: %v", err)
	}
	tn.Network = n
	return tn
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(b))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ipFile is where host-local records the allocation of ip.
func (tn *testNet) ipFile(ip string) string {
	return filepath.Join(tn.dataDir, tn.Name(), ip)
}

// cacheFile is libcni's cached result for the sandbox.
func (tn *testNet) cacheFile(sandboxID string) string {
	return filepath.Join(tn.cacheDir, "results", tn.Name()+"-"+sandboxID+"-eth0")
}

// allocations lists host-local's allocation files (without its lock and
// last-reserved bookkeeping).
func (tn *testNet) allocations(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(tn.dataDir, tn.Name()))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips
}

// attach attaches the sandbox and registers a Detach for the end of the test.
func (tn *testNet) attach(t *testing.T, sandboxID, netnsPath string) *Result {
	t.Helper()
	args := map[string]string{
		"K8S_POD_NAMESPACE": "default",
		"K8S_POD_NAME":      "pod-" + sandboxID[:8],
		"K8S_POD_UID":       "uid-" + sandboxID[:8],
	}
	t.Cleanup(func() {
		if err := tn.Detach(context.Background(), sandboxID, netnsPath, "", args, nil); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	res, err := tn.Attach(context.Background(), sandboxID, netnsPath, "", args, nil)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	return res
}

func TestAttachDetach(t *testing.T) {
	pluginDir := requirePlugins(t)
	tn := newTestNet(t, pluginDir)
	id, nsPath := pinTestNet(t)

	res := tn.attach(t, id, nsPath)
	if len(res.IPs) != 1 || res.Interface != "eth0" {
		t.Fatalf("Attach = %+v, want one IP on eth0", res)
	}
	ip := res.IPs[0]
	if parsed := net.ParseIP(ip); parsed == nil || !tn.subnet.Contains(parsed) || strings.Contains(ip, "/") {
		t.Fatalf("Attach IP %q is not a plain address in %s", ip, tn.subnet)
	}
	var raw struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(res.Raw, &raw); err != nil || raw.CNIVersion != "1.1.0" || len(raw.IPs) != 1 || raw.IPs[0].Address != ip+"/24" {
		t.Errorf("Raw = %s (%v), want a CNI 1.1.0 result with %s/24", res.Raw, err, ip)
	}

	// The interface exists in the sandbox's namespace with that address.
	out := run(t, "nsenter", "--net="+nsPath, "ip", "-o", "addr", "show", "dev", "eth0")
	if !strings.Contains(out, " "+ip+"/24 ") {
		t.Errorf("eth0 in the sandbox lacks %s/24:\n%s", ip, out)
	}
	// host-local recorded the allocation for this sandbox.
	if b, err := os.ReadFile(tn.ipFile(ip)); err != nil || !strings.HasPrefix(string(b), id) {
		t.Errorf("host-local allocation file %s = %q, %v; want it to name %s", tn.ipFile(ip), b, err, id)
	}
	if _, err := os.Stat(tn.cacheFile(id)); err != nil {
		t.Errorf("libcni cache entry: %v", err)
	}

	for i := range 2 { // the second Detach finds nothing to do
		if err := tn.Detach(context.Background(), id, nsPath, "", nil, nil); err != nil {
			t.Fatalf("Detach #%d: %v", i+1, err)
		}
		if _, err := os.Stat(tn.ipFile(ip)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after Detach #%d, allocation file: %v, want not exist", i+1, err)
		}
		if _, err := os.Stat(tn.cacheFile(id)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after Detach #%d, libcni cache entry: %v, want not exist", i+1, err)
		}
		if out := run(t, "nsenter", "--net="+nsPath, "ip", "-o", "link", "show"); strings.Contains(out, "eth0") {
			t.Errorf("after Detach #%d, eth0 is still in the sandbox:\n%s", i+1, out)
		}
	}
}

// TestDetachWithoutNamespace: the network namespace may be gone before the
// undo runs (unpinned, or lost in a reboot); Detach must still free the IP.
func TestDetachWithoutNamespace(t *testing.T) {
	pluginDir := requirePlugins(t)
	tn := newTestNet(t, pluginDir)

	tests := []struct {
		name string
		gone func(t *testing.T, path string) // makes the namespace disappear
	}{
		{"unpinned", func(t *testing.T, path string) {
			if err := Unpin(context.Background(), path); err != nil {
				t.Fatal(err)
			}
		}},
		{"unmounted, empty pin file left", func(t *testing.T, path string) {
			if err := Unpin(context.Background(), path); err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, "")
			t.Cleanup(func() { _ = os.Remove(path) })
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, nsPath := pinTestNet(t)
			ip := tn.attach(t, id, nsPath).IPs[0]
			tc.gone(t, nsPath)
			if err := tn.Detach(context.Background(), id, nsPath, "eth0", nil, nil); err != nil {
				t.Fatalf("Detach: %v", err)
			}
			if _, err := os.Stat(tn.ipFile(ip)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("allocation file after Detach: %v, want not exist", err)
			}
			if _, err := os.Stat(tn.cacheFile(id)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("libcni cache entry after Detach: %v, want not exist", err)
			}
		})
	}
	if got := tn.allocations(t); len(got) != 0 {
		t.Errorf("allocations left: %v", got)
	}
}

func TestDetachNeverAttached(t *testing.T) {
	pluginDir := requirePlugins(t)
	tn := newTestNet(t, pluginDir)
	id, nsPath := pinTestNet(t)
	for _, p := range []string{nsPath, "", filepath.Join(t.TempDir(), "netns", id)} {
		if err := tn.Detach(context.Background(), id, p, "", nil, nil); err != nil {
			t.Errorf("Detach(netns %q) of a sandbox never attached: %v", p, err)
		}
	}
}

// TestAttachReleasesDistinctIPs: two sandboxes on one network get distinct
// addresses, and detaching one leaves the other's allocation alone.
func TestAttachTwoSandboxes(t *testing.T) {
	pluginDir := requirePlugins(t)
	tn := newTestNet(t, pluginDir)
	id1, ns1 := pinTestNet(t)
	id2, ns2 := pinTestNet(t)
	ip1 := tn.attach(t, id1, ns1).IPs[0]
	ip2 := tn.attach(t, id2, ns2).IPs[0]
	if ip1 == ip2 {
		t.Fatalf("both sandboxes got %s", ip1)
	}
	if err := tn.Detach(context.Background(), id1, ns1, "", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := tn.allocations(t); !slices.Equal(got, []string{ip2}) {
		t.Fatalf("allocations after detaching the first sandbox = %v, want [%s]", got, ip2)
	}
}

func TestAttachWithoutPlugins(t *testing.T) {
	pluginDir := requirePlugins(t)
	tn := newTestNet(t, pluginDir)
	empty, err := LoadNetwork(tn.confDir, []string{t.TempDir()}, tn.cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	id, nsPath := pinTestNet(t)
	_, err = empty.Attach(context.Background(), id, nsPath, "", nil, nil)
	if err == nil || !strings.Contains(err.Error(), `"bridge"`) {
		t.Fatalf("Attach with no plugins = %v, want an error naming the missing plugin", err)
	}
	if got := tn.allocations(t); len(got) != 0 {
		t.Errorf("allocations after a failed Attach: %v", got)
	}
}

func TestAttachDetachInvalid(t *testing.T) {
	n := &Network{}
	fakeNet(t, n, "exit 0\n")
	id := newSandboxID(t)
	tests := []struct {
		name    string
		id, ns  string
		ifName  string
		args    map[string]string
		errLike string
	}{
		{"traversal id", "../../etc", "/x", "", nil, "sandbox ID"},
		{"empty id", "", "/x", "", nil, "sandbox ID"},
		{"bad interface", id, "/x", "../eth0", nil, "interface name"},
		{"long interface", id, "/x", "abcdefghijklmnop", nil, "interface name"},
		{"semicolon in value", id, "/x", "", map[string]string{"K8S_POD_NAME": "a;IgnoreUnknown=0"}, "CNI argument"},
		{"equals in key", id, "/x", "", map[string]string{"A=B": "c"}, "CNI argument"},
		{"empty key", id, "/x", "", map[string]string{"": "c"}, "CNI argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := n.Attach(context.Background(), tc.id, tc.ns, tc.ifName, tc.args, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.errLike) {
				t.Errorf("Attach = %v, want ErrInvalid about %s", err, tc.errLike)
			}
			if err := n.Detach(context.Background(), tc.id, tc.ns, tc.ifName, tc.args, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.errLike) {
				t.Errorf("Detach = %v, want ErrInvalid about %s", err, tc.errLike)
			}
		})
	}
	if _, err := n.Attach(context.Background(), id, "", "", nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Attach without a network namespace = %v, want ErrInvalid", err)
	}
}

// fakeNet points n at a one-plugin network whose plugin is a shell script,
// and returns the plugin's directory.
func fakeNet(t *testing.T, n *Network, script string) string {
	t.Helper()
	plugin := writePlugin(t, "fake", script)
	confDir := t.TempDir()
	writeFile(t, filepath.Join(confDir, "a.conf"), `{"cniVersion":"1.0.0","name":"fake","type":"fake"}`)
	loaded, err := LoadNetwork(confDir, []string{filepath.Dir(plugin)}, filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	*n = *loaded
	return filepath.Dir(plugin)
}

// TestAttachFakePlugin checks, without root, what Attach hands the plugin and
// how it reads the result.
func TestAttachFakePlugin(t *testing.T) {
	var n Network
	envFile := filepath.Join(t.TempDir(), "env")
	fakeNet(t, &n, fmt.Sprintf(`env > %s.$CNI_COMMAND
if [ "$CNI_COMMAND" = ADD ]; then
cat <<'EOF'
{"cniVersion":"1.0.0",
 "interfaces":[{"name":"cni0"},{"name":"eth0","sandbox":"/x"}],
 "ips":[{"address":"fd00::5/64","interface":1},{"address":"10.1.2.3/24","interface":1},{"address":"10.1.2.4/24"}]}
EOF
fi
`, envFile))
	id := newSandboxID(t)
	nsPath := filepath.Join(t.TempDir(), "netns", id) // never created
	res, err := n.Attach(context.Background(), id, nsPath, "", map[string]string{
		"K8S_POD_NAME":      "web",
		"K8S_POD_NAMESPACE": "default",
	}, nil)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if want := []string{"10.1.2.3", "10.1.2.4", "fd00::5"}; !slices.Equal(res.IPs, want) || res.Interface != "eth0" {
		t.Errorf("Attach = IPs %v on %q, want %v on eth0", res.IPs, res.Interface, want)
	}
	env := readEnv(t, envFile+".ADD")
	wantEnv := map[string]string{
		"CNI_COMMAND":     "ADD",
		"CNI_CONTAINERID": id,
		"CNI_NETNS":       nsPath,
		"CNI_IFNAME":      "eth0",
		"CNI_ARGS":        "IgnoreUnknown=1;K8S_POD_INFRA_CONTAINER_ID=" + id + ";K8S_POD_NAME=web;K8S_POD_NAMESPACE=default",
	}
	for k, v := range wantEnv {
		if env[k] != v {
			t.Errorf("plugin saw %s=%q, want %q", k, env[k], v)
		}
	}

	// DEL of a namespace that does not exist: CNI_NETNS is empty, and the
	// arguments are the cached ones.
	if err := n.Detach(context.Background(), id, nsPath, "", nil, nil); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	env = readEnv(t, envFile+".DEL")
	if env["CNI_NETNS"] != "" || env["CNI_ARGS"] != wantEnv["CNI_ARGS"] || env["CNI_CONTAINERID"] != id {
		t.Errorf("DEL saw CNI_NETNS=%q CNI_ARGS=%q CNI_CONTAINERID=%q", env["CNI_NETNS"], env["CNI_ARGS"], env["CNI_CONTAINERID"])
	}
	if matches, _ := filepath.Glob(filepath.Join(n.cacheDir, "results", "*")); len(matches) != 0 {
		t.Errorf("libcni cache entries left: %v", matches)
	}
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

func TestLoadNetwork(t *testing.T) {
	conflist := func(name string) string {
		return `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[{"type":"bridge"}]}`
	}
	conf := func(name string) string {
		return `{"cniVersion":"1.0.0","name":"` + name + `","type":"bridge"}`
	}
	tests := []struct {
		name      string
		files     map[string]string // nil: the directory does not exist
		want      string
		wantNoNet bool
	}{
		{name: "no directory", files: nil, wantNoNet: true},
		{name: "empty directory", files: map[string]string{}, wantNoNet: true},
		{name: "only other files", files: map[string]string{"README": conf("x"), "a.yaml": conf("y")}, wantNoNet: true},
		{name: "only broken files", files: map[string]string{"10-a.conflist": "{", "20-b.conf": `{"name":"b"}`}, wantNoNet: true},
		{name: "conflist", files: map[string]string{"10-a.conflist": conflist("a")}, want: "a"},
		{name: "single conf converted", files: map[string]string{"10-a.conf": conf("a")}, want: "a"},
		{name: "json conflist", files: map[string]string{"10-a.json": conflist("a")}, want: "a"},
		{name: "json conf", files: map[string]string{"10-a.json": conf("a")}, want: "a"},
		{name: "first by name wins", files: map[string]string{"20-b.conflist": conflist("b"), "10-c.conf": conf("c"), "30-a.conflist": conflist("a")}, want: "c"},
		{name: "broken first file skipped", files: map[string]string{"00-broken.conflist": "not json", "10-b.conflist": conflist("b")}, want: "b"},
		{name: "invalid network name skipped", files: map[string]string{"00-x.conflist": conflist("a/b"), "10-b.conflist": conflist("b")}, want: "b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "net.d")
			if tc.files != nil {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, content := range tc.files {
				writeFile(t, filepath.Join(dir, name), content)
			}
			n, err := LoadNetwork(dir, []string{"/usr/lib/cni"}, t.TempDir())
			if tc.wantNoNet {
				if !errors.Is(err, ErrNoNetwork) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("LoadNetwork = %v, %v; want ErrNoNetwork naming %s", n, err, dir)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadNetwork: %v", err)
			}
			if n.Name() != tc.want {
				t.Fatalf("LoadNetwork picked %q, want %q", n.Name(), tc.want)
			}
		})
	}
	if _, err := LoadNetwork(t.TempDir(), nil, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("LoadNetwork without plugin directories = %v, want ErrInvalid", err)
	}
}
