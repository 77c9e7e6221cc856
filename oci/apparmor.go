package oci

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/crijournal/crijournal/oci/spec"
)

// appArmorProfiles lists the loaded profiles: "name (mode)" lines.
const appArmorProfiles = "/sys/kernel/security/apparmor/profiles"

// readAppArmor finds out whether AppArmor is enabled as runc does: its securityfs
// directory exists and the module's enabled parameter is Y.
func readAppArmor() spec.AppArmorHost {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	if err != nil || !strings.HasPrefix(string(b), "Y") || !exists("/sys/kernel/security/apparmor") {
		return spec.AppArmorHost{}
	}
	return spec.AppArmorHost{
		Enabled:      true,
		Loaded:       func(name string) (bool, error) { return loadedAppArmor(appArmorProfiles, name) },
		Load:         loadAppArmorProfile,
		ProfileInput: readAppArmorProfileInput,
	}
}

// loadedAppArmor says whether the profiles list (the kernel's file of that name)
// has a profile of the name.
func loadedAppArmor(list, name string) (bool, error) {
	f, err := os.Open(list)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.LastIndex(line, " ("); i >= 0 && line[:i] == name {
			return true, nil
		}
	}
	return false, sc.Err()
}

// appArmorPolicyDir holds the node's AppArmor policy: the files the profile may
// include.
const appArmorPolicyDir = "/etc/apparmor.d"

// readAppArmorProfileInput gathers the input of the profile called name from this
// node: the daemon's own profile and which policy files exist.
func readAppArmorProfileInput(name string) spec.AppArmorProfileInput {
	has := func(f string) bool { return exists(filepath.Join(appArmorPolicyDir, f)) }
	return spec.AppArmorProfileInput{
		Name:     name,
		Daemon:   ownAppArmorProfile(),
		ABI:      has("abi/3.0"),
		Tunables: has("tunables/global"),
		Base:     has("abstractions/base"),
	}
}

// ownAppArmorProfile returns the profile the daemon runs under, "unconfined" when
// unknown. The kernel writes it as "name (mode)", or just "unconfined"; the
// AppArmor-only file is read first, as runc does, since with stacked security
// modules the generic one may belong to another.
func ownAppArmorProfile() string {
	for _, f := range []string{"/proc/self/attr/apparmor/current", "/proc/self/attr/current"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSpace(string(b)), " (")
		if name != "" {
			return name
		}
	}
	return "unconfined"
}

// errNoAppArmorParser is the reason the default profile cannot be loaded where the
// AppArmor tools are not installed.
var errNoAppArmorParser = errors.New("apparmor_parser not found in $PATH, /sbin or /usr/sbin (install the apparmor package)")

// appArmorParser finds apparmor_parser: in $PATH, or in /sbin or /usr/sbin, which a
// service's $PATH may lack (CRI-O looks in /sbin for the same reason).
func appArmorParser() (string, error) {
	if p, err := exec.LookPath("apparmor_parser"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/sbin/apparmor_parser", "/usr/sbin/apparmor_parser"} {
		if exists(p) {
			return p, nil
		}
	}
	return "", errNoAppArmorParser
}

// appArmorLoadTimeout bounds one run of apparmor_parser, which compiles a profile of
// this size in well under a second.
const appArmorLoadTimeout = 30 * time.Second

// loadAppArmorProfile compiles the profile called name from its text and loads it
// into the kernel, replacing a loaded profile of that name, as containerd and CRI-O
// do: apparmor_parser -r (replace) -K (no policy cache: the node's cache directory
// may be read-only), the text on its standard input. ctx, bounded by
// appArmorLoadTimeout, kills the parser when it ends.
func loadAppArmorProfile(ctx context.Context, name, text string) error {
	parser, err := appArmorParser()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, appArmorLoadTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, parser, "-Kr")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("load AppArmor profile %q: %s -Kr: %w: %s", name, parser, err, bytes.TrimSpace(out))
	}
	return nil
}
