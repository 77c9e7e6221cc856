package netns

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/layout"
)

// host-local, the IPAM plugin of most nodes, keeps each address it hands out as a file
// named after it in its network's directory, holding the owner's container ID; a DEL
// finds the file by that ID. It writes the file without fsync: a power cut can leave it
// empty (the name made durable, the contents not), and such a file matches no DEL, so
// its address would stay taken for good, owned by no sandbox. host-local creates and
// writes a file under its lock (flock of the directory's "lock" file), so a file found
// empty while that lock is held is one a cut tore, never one being written.

// HostLocalDirs returns the host-local directories of the networks configured in
// confDir (every network, not only the first: sandboxes may be attached to one
// configured before). A file that does not parse is skipped.
func HostLocalDirs(confDir string) ([]string, error) {
	if confDir == "" {
		return nil, nil
	}
	files, err := libcni.ConfFiles(confDir, confExtensions)
	if err != nil {
		return nil, fmt.Errorf("CNI configuration in %s: %w", confDir, err)
	}
	var dirs []string
	for _, file := range files {
		list, err := loadConfFile(file)
		if err != nil {
			continue // the network's own load says why
		}
		for _, p := range list.Plugins {
			var conf struct {
				IPAM struct {
					Type    string `json:"type"`
					DataDir string `json:"dataDir"`
				} `json:"ipam"`
			}
			if json.Unmarshal(p.Bytes, &conf) == nil && conf.IPAM.Type == "host-local" {
				dirs = append(dirs, filepath.Join(cmp.Or(conf.IPAM.DataDir, layout.DefaultHostLocalDataDir), list.Name))
			}
		}
	}
	return dirs, nil
}

// RemoveTornAllocations removes, under host-local's lock, the address files of dir (a
// network's host-local directory) that a power cut left empty, and returns the addresses
// freed. A directory that does not exist holds nothing.
func RemoveTornAllocations(dir string) ([]string, error) {
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no allocation was ever made here
	}
	if err != nil {
		return nil, fmt.Errorf("host-local directory %s: %w", dir, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("host-local directory %s: lock: %w", dir, err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN) //nolint:errcheck // closing unlocks too
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("host-local directory %s: %w", dir, err)
	}
	var freed []string
	var errs []error
	for _, e := range entries {
		if e.Name() == "lock" || strings.HasPrefix(e.Name(), "last_reserved_ip") || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil || info.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		freed = append(freed, e.Name())
	}
	return freed, errors.Join(errs...)
}
