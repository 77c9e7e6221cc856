package oci

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// AppArmor.
//
// On a node without AppArmor (the kernel module absent or disabled), a container that
// asks for a named (Localhost) profile is refused: running it unconfined would defeat
// what its pod asked for without anyone noticing. RuntimeDefault, Unconfined and unset
// run without a profile, as the node allows.
//
// Where AppArmor is enabled, a Localhost profile must be loaded and is applied;
// RuntimeDefault (and unset, as containerd and CRI-O treat it) applies
// [DefaultAppArmorProfile] when that profile is loaded, and nothing otherwise:
// crijournal does not write or load profiles itself. A privileged container gets no
// default profile, only a Localhost one it names.

// DefaultAppArmorProfile is the profile RuntimeDefault applies where AppArmor is enabled
// and a profile of this name is loaded.
const DefaultAppArmorProfile = "crijournal-default"

// errNoAppArmor is the reason Localhost AppArmor profiles are refused on this node.
const errNoAppArmor = "AppArmor is not available on this node (the kernel has it disabled or not built in)"

// appArmorHost says whether AppArmor confines processes here and which profiles are
// loaded.
type appArmorHost struct {
	enabled bool
	// loaded says whether a profile of the name is loaded; nil means none is.
	loaded func(name string) (bool, error)
}

// appArmorFor returns the AppArmor profile of a container: "" for none.
func appArmorFor(sc *runtimeapi.LinuxContainerSecurityContext, aa appArmorHost) (string, error) {
	//lint:ignore SA1019 older kubelets send only the deprecated string.
	p, err := requestedProfile(sc.GetApparmor(), sc.GetApparmorProfile(), "AppArmor", false)
	if err != nil {
		return "", err
	}
	if p != nil && p.GetProfileType() == runtimeapi.SecurityProfile_Unconfined {
		return "", nil
	}
	if p.GetProfileType() == runtimeapi.SecurityProfile_Localhost {
		// The kubelet gives the profile's name, or (older ones) "localhost/<name>".
		name := strings.TrimPrefix(p.GetLocalhostRef(), profileLocalhost)
		if !aa.enabled {
			return "", invalid("AppArmor profile %q requested, but %s", name, errNoAppArmor)
		}
		ok, err := aa.isLoaded(name)
		if err != nil {
			return "", fmt.Errorf("AppArmor profile %q: %w", name, err)
		}
		if !ok {
			return "", invalid("AppArmor profile %q is not loaded on this node", name)
		}
		return name, nil
	}
	// RuntimeDefault or unset.
	if !aa.enabled || sc.GetPrivileged() {
		return "", nil
	}
	ok, err := aa.isLoaded(DefaultAppArmorProfile)
	if err != nil || !ok {
		return "", err
	}
	return DefaultAppArmorProfile, nil
}

func (aa appArmorHost) isLoaded(name string) (bool, error) {
	if aa.loaded == nil {
		return false, nil
	}
	return aa.loaded(name)
}

// appArmorProfiles lists the loaded profiles: "name (mode)" lines.
const appArmorProfiles = "/sys/kernel/security/apparmor/profiles"

// readAppArmor finds out whether AppArmor is enabled as runc does: its securityfs
// directory exists and the module's enabled parameter is Y.
func readAppArmor() appArmorHost {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	if err != nil || !strings.HasPrefix(string(b), "Y") || !exists("/sys/kernel/security/apparmor") {
		return appArmorHost{}
	}
	return appArmorHost{enabled: true, loaded: func(name string) (bool, error) {
		return loadedAppArmor(appArmorProfiles, name)
	}}
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
