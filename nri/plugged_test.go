package nri

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/adaptation"
)

// TestPlugged: with nothing in the plugin directory and no plugin connected, no plugin can
// be registered (Start's own synchronization, of the plugins it started, does not count);
// a file in the plugin directory at Start, or an external plugin's synchronization,
// makes it so for good. Disabled, never.
func TestPlugged(t *testing.T) {
	if (*NRI)(nil).Plugged() {
		t.Error("a disabled NRI is plugged")
	}
	start := func(t *testing.T, pluginDir string) *NRI {
		t.Helper()
		dir := t.TempDir()
		n, err := New(Options{Enable: true, Socket: filepath.Join(dir, "nri.sock"), PluginDir: pluginDir,
			PluginConfigDir: filepath.Join(dir, "conf")})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(noSource{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		return n
	}
	noPlugins := func(ctx context.Context, pods []*adaptation.PodSandbox, ctrs []*adaptation.Container) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}

	n := start(t, filepath.Join(t.TempDir(), "missing"))
	if n.Plugged() {
		t.Fatal("plugged after Start with no plugin directory")
	}
	if err := n.synchronize(context.Background(), noPlugins); err != nil {
		t.Fatal(err)
	}
	if !n.Plugged() {
		t.Error("not plugged after an external plugin's synchronization")
	}

	n = start(t, t.TempDir())
	if n.Plugged() {
		t.Error("plugged after Start with an empty plugin directory")
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "10-broken"), []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if n := start(t, dir); !n.Plugged() {
		t.Error("not plugged after Start with a plugin in the plugin directory")
	}
}
