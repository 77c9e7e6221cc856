package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// otherNetwork writes, in place of every configuration in confDir, a network of another
// name (never attached to: its bridge is never made).
func otherNetwork(t *testing.T, confDir, name string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(confDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON(t, filepath.Join(confDir, "20-other.conflist"), map[string]any{
		"cniVersion": "1.0.0",
		"name":       name,
		"plugins":    []any{map[string]any{"type": "bridge", "bridge": "cjtnever0", "ipam": map[string]any{"type": "host-local", "subnet": "10.87.0.0/24"}}},
	})
}

// TestDetachStepAfterNetworkChange: the undo of an attach step reaches the network the
// sandbox was attached to after the configured network changed: through libcni's cache,
// or the configuration the step recorded. A step recorded before the configuration was
// (no ArgConfig) still works through the cache, and without it fails rather than claim a
// release it did not make: a changed network never strands an address.
func TestDetachStepAfterNetworkChange(t *testing.T) {
	pluginDir := requirePlugins(t)
	requireRoot(t)
	for _, tt := range []struct {
		name           string
		recordedConfig bool
		keepCache      bool
		wantErr        bool
	}{
		{"recorded configuration, libcni cache", true, true, false},
		{"recorded configuration, cache lost", true, false, false},
		{"step from before configurations were recorded, libcni cache", false, true, false},
		{"step from before configurations were recorded, cache lost", false, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTestNet(t, pluginDir)
			id, path := pinTestNet(t)
			cniArgs := Attachment{SandboxID: id, Pod: Pod{Name: "pod", Namespace: "default", UID: "uid"}}.cniArgs()
			if _, err := tn.Attach(context.Background(), id, path, "", cniArgs, nil); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			t.Cleanup(func() {
				if err := tn.Detach(context.Background(), id, path, "", cniArgs, nil); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			})
			args := AttachStep(tn.Network, id, path, DefaultIfName, Pod{Name: "pod", Namespace: "default", UID: "uid"}, nil).Args
			if len(args[ArgConfig]) == 0 {
				t.Fatal("AttachStep recorded no configuration")
			}
			if !tt.recordedConfig {
				delete(args, ArgConfig)
			}
			if !tt.keepCache {
				if err := os.Remove(tn.cacheFile(id)); err != nil {
					t.Fatal(err)
				}
			}
			otherNetwork(t, tn.confDir, "crijournal-other")
			networks := &Networks{ConfDir: tn.confDir, PluginDirs: []string{pluginDir}, CacheDir: tn.cacheDir}
			if n, err := networks.Network(); err != nil || n.Name() != "crijournal-other" {
				t.Fatalf("the configured network is %v (%v), want crijournal-other", n, err)
			}

			err := DetachStep(context.Background(), networks, args, true)
			if tt.wantErr {
				if !errors.Is(err, ErrNoNetwork) {
					t.Fatalf("DetachStep = %v, want an error wrapping ErrNoNetwork", err)
				}
				if len(tn.allocations(t)) != 1 {
					t.Errorf("allocations %v after a failed DetachStep, want the sandbox's one", tn.allocations(t))
				}
				return
			}
			if err != nil {
				t.Fatalf("DetachStep: %v", err)
			}
			if got := tn.allocations(t); len(got) != 0 {
				t.Errorf("allocations %v after DetachStep, want none", got)
			}
			if _, err := os.Stat(tn.cacheFile(id)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("libcni's cache entry after DetachStep: %v, want none", err)
			}
		})
	}
}

// TestNetworksFollowTheDirectory: while Watch runs, Network follows the configuration
// directory: another network, then none, then one again. Watch ends with its context.
func TestNetworksFollowTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d") // made by Watch
	networks := &Networks{ConfDir: dir, PluginDirs: []string{"/nonexistent"}}
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan error, 1)
	go func() { watched <- networks.Watch(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-watched; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})

	wait := func(want string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			n, err := networks.Network()
			got := ""
			if err == nil {
				got = n.Name()
			} else if !errors.Is(err, ErrNoNetwork) {
				t.Fatalf("Network: %v", err)
			}
			if got == want {
				return nil
			}
			return fmt.Errorf("Network is %q (%v) 10s after the directory changed, want %q", got, err, want)
		})
	}
	_ = testenv.Poll(2*time.Second, 20*time.Millisecond, func() error { // Watch makes the directory
		_, err := os.Stat(dir)
		return err
	})
	otherNetwork(t, dir, "first")
	wait("first")
	otherNetwork(t, dir, "second")
	wait("second")
	if err := os.Remove(filepath.Join(dir, "20-other.conflist")); err != nil {
		t.Fatal(err)
	}
	wait("")
	otherNetwork(t, dir, "third")
	wait("third")
}
