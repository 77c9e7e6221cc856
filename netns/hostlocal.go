package netns

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/durable"
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
	lists, err := configuredLists(confDir)
	var dirs []string
	for _, list := range lists {
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
	return dirs, err
}

// configuredLists loads the network lists configured in confDir, every one (not only
// the first: sandboxes may be attached to one configured before). A file that does not
// parse is skipped: the network's own load says why.
func configuredLists(confDir string) ([]*libcni.NetworkConfigList, error) {
	if confDir == "" {
		return nil, nil
	}
	files, err := libcni.ConfFiles(confDir, confExtensions)
	if err != nil {
		return nil, fmt.Errorf("CNI configuration in %s: %w", confDir, err)
	}
	var lists []*libcni.NetworkConfigList
	for _, file := range files {
		if list, err := loadConfFile(file); err == nil {
			lists = append(lists, list)
		}
	}
	return lists, nil
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

// libcni keeps each ADD's result in its cache (<cache>/results/<network>-<ID>-<ifname>),
// written without fsync, and reads it back for the DEL. A power cut can leave such a
// file empty (its name made durable, its contents not). An empty result is of use to
// nobody: libcni fails a DEL on it ("unexpected end of JSON input"), so the attachment's
// own undo could never finish while it is there, and when the attachment is gone already
// nothing would ever remove it. libcni writes a result in one call right after its ADD,
// so an empty one last written before this boot is one a cut tore.

// RemoveTornResults removes the files of resultsDir (libcni's results directory) that
// are empty and were last written before bootTime, so a cut left them, and whose name
// starts with one of networks' names followed by "-" (in libcni's default directory,
// shared with the node's other runtimes, only this node's networks are the daemon's).
// It returns the names removed. A directory that does not exist holds nothing.
func RemoveTornResults(resultsDir string, networks []string, bootTime time.Time) ([]string, error) {
	entries, err := os.ReadDir(resultsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("libcni results directory %s: %w", resultsDir, err)
	}
	ours := func(name string) bool {
		return slices.ContainsFunc(networks, func(nw string) bool { return nw != "" && strings.HasPrefix(name, nw+"-") })
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || !ours(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil || info.Size() != 0 || !info.ModTime().Before(bootTime) {
			continue
		}
		if err := os.Remove(filepath.Join(resultsDir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	if len(removed) > 0 {
		if err := durable.SyncDir(resultsDir); err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// NetworkNames returns the names of the networks configured in confDir (every one, as
// HostLocalDirs).
func NetworkNames(confDir string) ([]string, error) {
	lists, err := configuredLists(confDir)
	var names []string
	for _, list := range lists {
		if list.Name != "" {
			names = append(names, list.Name)
		}
	}
	return names, err
}

// BootTime is when the running kernel booted (now less its uptime), to the second.
func BootTime() (time.Time, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return time.Time{}, fmt.Errorf("sysinfo: %w", err)
	}
	return time.Now().Add(-time.Duration(si.Uptime) * time.Second).Truncate(time.Second), nil
}
