package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/fsnotify/fsnotify"
)

// NetworkSource hands out the current CNI network, the one new sandboxes are attached to.
type NetworkSource interface {
	Network() (*Network, error)
}

// Networks hands out the CNI network of a configuration directory (see LoadNetwork) and
// the networks existing attachments were made on.
//
// While Watch runs, the directory is watched (as CRI-O and containerd do): after any change
// in it the network is loaded again at its next use, so that new sandboxes use the new
// network and a directory left without a usable configuration reports ErrNoNetwork. Without
// Watch, the first network loaded is kept; until one loads, every call tries again.
type Networks struct {
	ConfDir    string
	PluginDirs []string
	CacheDir   string

	mu      sync.Mutex
	network *Network
	stale   bool // the directory changed since network was loaded
}

var _ NetworkSource = (*Networks)(nil)

// Network returns the current network, loading it if needed.
func (s *Networks) Network() (*Network, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.network != nil && !s.stale {
		return s.network, nil
	}
	s.stale = false
	n, err := LoadNetwork(s.ConfDir, s.PluginDirs, s.CacheDir)
	if err != nil {
		s.network = nil
		return nil, err
	}
	s.network = n
	return n, nil
}

// markStale makes the next Network call load the directory again.
func (s *Networks) markStale() {
	s.mu.Lock()
	s.stale = true
	s.mu.Unlock()
}

// Watch watches the configuration directory until ctx ends, and returns nil then; it
// returns an error when the watch cannot be set up or the directory itself goes away. The
// directory is created if missing, as CRI-O does, so that a network installed later is
// seen. The caller owns the goroutine running Watch and stops it through ctx.
func (s *Networks) Watch(ctx context.Context) error {
	if err := os.MkdirAll(s.ConfDir, 0o755); err != nil {
		return fmt.Errorf("watch CNI configuration directory: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch CNI configuration directory %s: %w", s.ConfDir, err)
	}
	defer w.Close()
	if err := w.Add(s.ConfDir); err != nil {
		return fmt.Errorf("watch CNI configuration directory %s: %w", s.ConfDir, err)
	}
	// Anything may have changed before the watch began.
	s.markStale()
	dir := filepath.Clean(s.ConfDir)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			s.markStale()
			if filepath.Clean(ev.Name) == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				return fmt.Errorf("watch CNI configuration directory %s: the directory was removed", s.ConfDir)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			// An overflow lost events: load again, to be sure.
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				return fmt.Errorf("watch CNI configuration directory %s: %w", s.ConfDir, err)
			}
			s.markStale()
		}
	}
}

// Attached returns the network an existing attachment was made on, to detach it: the
// network named name with the configuration config that its StepAttach recorded. Detach
// itself prefers libcni's cached ADD configuration when there is one.
//
// Records written before the configuration was recorded have none: then the configured
// network is used if it still has that name, and otherwise a network known by its name
// only, which Detach can use through libcni's cache alone.
func (s *Networks) Attached(name string, config []byte) (*Network, error) {
	if len(config) == 0 {
		current, err := s.Network()
		if err == nil && (name == "" || current.Name() == name) {
			return current, nil
		}
		if name == "" {
			return nil, err
		}
		return s.networkOn(&libcni.NetworkConfigList{Name: name}), nil
	}
	list, err := libcni.NetworkConfFromBytes(config)
	if err != nil {
		return nil, fmt.Errorf("recorded configuration of network %q: %w", name, err)
	}
	if name != "" && list.Name != name {
		return nil, fmt.Errorf("recorded configuration of network %q: %w: it names network %q", name, ErrInvalid, list.Name)
	}
	return s.networkOn(list), nil
}

// networkOn builds a Network on list with the plugin and cache directories of s.
func (s *Networks) networkOn(list *libcni.NetworkConfigList) *Network {
	cacheDir := s.CacheDir
	if cacheDir == "" {
		cacheDir = libcni.CacheDir
	}
	return &Network{
		list:     list,
		cni:      libcni.NewCNIConfigWithCacheDir(slices.Clone(s.PluginDirs), cacheDir, &pluginExec{}),
		cacheDir: cacheDir,
	}
}
