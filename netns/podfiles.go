package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/layout"
)

// A pod's files: what its containers bind-mount from the sandbox rather than from their
// image, one directory per sandbox (see PodFilesDir):
//
//	<dir>/<sandboxID>/resolv.conf  the pod's DNS configuration (/etc/resolv.conf)
//	<dir>/<sandboxID>/hostname     the pod's hostname (/etc/hostname)
//	<dir>/<sandboxID>/shm          a tmpfs of ShmSize, the pod's /dev/shm
//
// Each is made by its own step ([ResolvConfStep], [HostnameStep], [ShmStep]) whose undo
// removes it (unmounts it) and then the sandbox's directory once it is empty; "not there"
// is success, so an undo may run before, during or after its action, any number of times.
// The directory is meant to live under the daemon's run_root: it survives a restart of the
// daemon, not a reboot, like the namespace pins.

// ShmSize is the size of a pod's /dev/shm: 64 MiB, CRI-O's default shm_size.
const ShmSize = 64 << 20

// HostShm is the /dev/shm of pods that share the host's IPC namespace.
const HostShm = "/dev/shm"

// HostResolvConf is the resolv.conf a pod without a DNS configuration gets a copy of.
const HostResolvConf = "/etc/resolv.conf"

// Names of a pod's files in its directory.
const (
	fileResolvConf = "resolv.conf"
	fileHostname   = "hostname"
	fileShm        = "shm"
)

// Step kinds of the pod's files. The strings are stored in the journal: never change them.
const (
	// StepResolvConf writes a pod's resolv.conf. Args: ArgPath. Made by ResolvConfStep.
	StepResolvConf journal.StepKind = "pod-resolv-conf"
	// StepHostname writes a pod's hostname file. Args: ArgPath. Made by HostnameStep.
	StepHostname journal.StepKind = "pod-hostname"
	// StepShm mounts a pod's /dev/shm (a tmpfs). Args: ArgPath. Made by ShmStep.
	StepShm journal.StepKind = "pod-shm"
)

// Stages of the pod's files' steps.
const (
	StageResolvConf = "sandbox resolv.conf"
	StageHostname   = "sandbox hostname file"
	StageShm        = "sandbox shared memory (/dev/shm)"
)

// PodFilesDir returns the directory of a sandbox's files under dir.
func PodFilesDir(dir, sandboxID string) string { return layout.PodDirIn(dir, sandboxID) }

// DNS is a pod's DNS configuration (the CRI's DNSConfig).
type DNS struct {
	Servers  []string // IP addresses
	Searches []string // search domains
	Options  []string // resolver options, such as "ndots:5"
}

// IsZero reports whether d configures nothing: the pod then gets the host's resolv.conf.
func (d DNS) IsZero() bool {
	return len(d.Servers) == 0 && len(d.Searches) == 0 && len(d.Options) == 0
}

// Validate returns an error wrapping ErrInvalid when d cannot be written as a
// resolv.conf: a server that is not an IP address, or a search domain or option that is
// empty or holds white space (it would be read back as several, or as another line).
func (d DNS) Validate() error {
	for _, s := range d.Servers {
		if _, err := netip.ParseAddr(s); err != nil {
			return fmt.Errorf("DNS server %q: %w: not an IP address", s, ErrInvalid)
		}
	}
	for _, f := range []struct {
		what   string
		values []string
	}{{"DNS search domain", d.Searches}, {"DNS option", d.Options}} {
		for _, v := range f.values {
			if v == "" || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
				return fmt.Errorf("%s %q: %w: empty or holds white space or control characters", f.what, v, ErrInvalid)
			}
		}
	}
	return nil
}

// ResolvConf renders d as a resolv.conf: a "search" line, one "nameserver" line per
// server, an "options" line, each only when d has any (as CRI-O writes it). It is empty
// for a zero d.
func (d DNS) ResolvConf() ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if len(d.Searches) > 0 {
		b.WriteString("search " + strings.Join(d.Searches, " ") + "\n")
	}
	for _, s := range d.Servers {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(d.Options) > 0 {
		b.WriteString("options " + strings.Join(d.Options, " ") + "\n")
	}
	return b.Bytes(), nil
}

// ResolvConfStep returns the step that writes a sandbox's resolv.conf in its directory
// under dir: dns rendered, or, when dns is zero, a copy of hostFile (HostResolvConf).
// Its result is the file's path.
func ResolvConfStep(dir, sandboxID string, dns DNS, hostFile string) journal.Action[string] {
	path := filepath.Join(PodFilesDir(dir, sandboxID), fileResolvConf)
	return journal.Action[string]{Kind: StepResolvConf, Stage: StageResolvConf, Args: map[string]string{ArgPath: path},
		Run: func(ctx context.Context) (string, error) {
			content, err := dns.ResolvConf()
			if err == nil && dns.IsZero() {
				content, err = os.ReadFile(hostFile)
			}
			if err != nil {
				return "", fmt.Errorf("resolv.conf of %s: %w", sandboxID, err)
			}
			return path, writePodFile(sandboxID, path, content)
		}}
}

// HostnameStep returns the step that writes a sandbox's hostname file (the hostname and a
// newline) in its directory under dir. Its result is the file's path.
func HostnameStep(dir, sandboxID, hostname string) journal.Action[string] {
	path := filepath.Join(PodFilesDir(dir, sandboxID), fileHostname)
	return journal.Action[string]{Kind: StepHostname, Stage: StageHostname, Args: map[string]string{ArgPath: path},
		Run: func(ctx context.Context) (string, error) {
			if hostname == "" || strings.ContainsAny(hostname, "\n\x00") {
				return "", fmt.Errorf("hostname file of %s: hostname %q: %w", sandboxID, hostname, ErrInvalid)
			}
			return path, writePodFile(sandboxID, path, []byte(hostname+"\n"))
		}}
}

// ShmStep returns the step that mounts a sandbox's /dev/shm, a tmpfs of ShmSize (mode
// 1777, nosuid, nodev, noexec, as CRI-O mounts it), in its directory under dir. Its
// result is the mount point.
func ShmStep(dir, sandboxID string) journal.Action[string] {
	path := filepath.Join(PodFilesDir(dir, sandboxID), fileShm)
	return journal.Action[string]{Kind: StepShm, Stage: StageShm, Args: map[string]string{ArgPath: path},
		Run: func(ctx context.Context) (string, error) {
			if err := checkPodFilesID(sandboxID); err != nil {
				return "", err
			}
			if err := os.MkdirAll(path, 0o700); err != nil {
				return "", fmt.Errorf("shm of %s: %w", sandboxID, err)
			}
			data := fmt.Sprintf("mode=1777,size=%d", ShmSize)
			if err := unix.Mount("shm", path, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, data); err != nil {
				return "", fmt.Errorf("shm of %s: mount tmpfs on %s: %w", sandboxID, path, err)
			}
			return path, nil
		}}
}

// IsMountPoint reports whether path is a mount point of a filesystem other than its
// parent directory's (as a pod's /dev/shm is: a tmpfs of its own).
func IsMountPoint(path string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(path, &st) != nil || unix.Lstat(filepath.Dir(path), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// writePodFile writes one of a sandbox's files, making its directory.
func writePodFile(sandboxID, path string, content []byte) error {
	if err := checkPodFilesID(sandboxID); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("files of %s: %w", sandboxID, err)
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return fmt.Errorf("files of %s: %w", sandboxID, err)
	}
	return nil
}

// RemovePodFile is the undo of ResolvConfStep and HostnameStep: it removes the file at
// path, then its directory if that is empty. A file or directory that is not there is
// success.
func RemovePodFile(path string) error {
	if err := checkPodFile(path, fileResolvConf, fileHostname); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove pod file: %w", err)
	}
	return removePodDir(filepath.Dir(path))
}

// UnmountShm is the undo of ShmStep: it unmounts the tmpfs at path (every mount stacked
// there), removes the mount point, then its directory if that is empty. A path that is
// not mounted, or not there, is success. The unmount is lazy (MNT_DETACH), as CRI-O's:
// containers of the pod that still run keep their own bind of it.
func UnmountShm(path string) error {
	if err := checkPodFile(path, fileShm); err != nil {
		return err
	}
	for {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break // not (any more) a mount point
		}
		if err != nil {
			return fmt.Errorf("unmount shm %s: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove shm mount point: %w", err)
	}
	return removePodDir(filepath.Dir(path))
}

// podFilesID is what the directory of a sandbox's files is named: a journal ID (64
// lowercase hex digits). It is stricter than validateID on purpose: an undo removes what
// its recorded path names, and /etc/resolv.conf or /dev/shm must never look like a pod's.
var podFilesID = regexp.MustCompile(`^[0-9a-f]{64}$`)

// checkPodFiles refuses a sandbox ID that cannot name a directory of pod files.
func checkPodFilesID(sandboxID string) error {
	if !podFilesID.MatchString(sandboxID) {
		return fmt.Errorf("sandbox ID %q: %w: pod files need an ID of 64 lowercase hex digits", sandboxID, ErrInvalid)
	}
	return nil
}

// checkPodFile refuses to undo anything but one of a sandbox's files: a recorded path
// must be absolute, clean and end in <sandboxID>/<one of names>.
func checkPodFile(path string, names ...string) error {
	base, id := filepath.Base(path), filepath.Base(filepath.Dir(path))
	for _, n := range names {
		if base == n && filepath.IsAbs(path) && filepath.Clean(path) == path && checkPodFilesID(id) == nil {
			return nil
		}
	}
	return fmt.Errorf("pod file %q: %w: not one of a sandbox's files (<dir>/<sandbox ID>/{%s})", path, ErrInvalid, strings.Join(names, ","))
}

// removePodDir removes a sandbox's directory if it is empty.
func removePodDir(dir string) error {
	err := os.Remove(dir)
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		return nil
	}
	return fmt.Errorf("remove pod directory: %w", err)
}

// registerPodFileUndos registers the undos of the pod's files' steps.
func registerPodFileUndos(reg *journal.Registry) {
	reg.Register(StepResolvConf, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		return RemovePodFile(step.Args[ArgPath])
	})
	reg.Register(StepHostname, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		return RemovePodFile(step.Args[ArgPath])
	})
	reg.Register(StepShm, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		return UnmountShm(step.Args[ArgPath])
	})
}
