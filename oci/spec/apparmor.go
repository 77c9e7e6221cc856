package spec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// AppArmor.
//
// On a node without AppArmor (the kernel module absent or disabled), a container that
// asks for a named (Localhost) profile is refused: running it unconfined would defeat
// what its pod asked for without anyone noticing. RuntimeDefault, Unconfined and unset
// run without a profile, as the node allows.
//
// Where AppArmor is enabled, a Localhost profile must be loaded and is applied.
// RuntimeDefault, and unset (as containerd and CRI-O treat it), apply
// [DefaultAppArmorProfile]. When that profile is not loaded, the container's
// creation generates it (apparmor_profile.go) and loads it with apparmor_parser
// first: lazily, as containerd does, so the daemon starts without it and a profile
// unloaded later (an AppArmor service restart) comes back with the next container.
// When it cannot be loaded (no apparmor_parser, a parser error, a timeout), the
// container is refused with [ErrNoDefaultAppArmor], never run unconfined; containerd
// refuses the container the same way, and CRI-O refuses to start at all. A
// privileged container gets no default profile, only a Localhost one it names.

// DefaultAppArmorProfile is the profile RuntimeDefault applies where AppArmor is
// enabled. The daemon generates and loads it when a container needs it and it is not
// loaded.
const DefaultAppArmorProfile = "crijournal-default"

// ErrNoDefaultAppArmor is returned when a container is to run under
// [DefaultAppArmorProfile] (it asks for RuntimeDefault or for nothing, on a node with
// AppArmor) and the profile is not loaded and cannot be loaded: the container is
// refused rather than run unconfined. The node is at fault, not the request: the
// server maps it to FailedPrecondition.
var ErrNoDefaultAppArmor = errors.New("the default AppArmor profile is not available")

// NoAppArmorReason is the reason Localhost AppArmor profiles are refused on this node.
const NoAppArmorReason = "AppArmor is not available on this node (the kernel has it disabled or not built in)"

// AppArmorHost says whether AppArmor confines processes here, which profiles are
// loaded, and how to load one.
type AppArmorHost struct {
	Enabled bool
	// Loaded says whether a profile of the name is loaded; nil means none is.
	Loaded func(name string) (bool, error)
	// Load loads the profile called name from its text, replacing one of that name;
	// nil means profiles cannot be loaded here.
	Load func(ctx context.Context, name, text string) error
	// ProfileInput gathers the input of the text of the profile called name from the
	// node (oci's readAppArmorProfileInput); nil means only the name.
	ProfileInput func(name string) AppArmorProfileInput
}

// appArmorFor returns the AppArmor profile of a container: "" for none. It loads
// the default profile when the container needs it and it is not loaded; ctx bounds
// that.
func appArmorFor(ctx context.Context, sc *runtimeapi.LinuxContainerSecurityContext, aa AppArmorHost) (string, error) {
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
		if !aa.Enabled {
			return "", invalid("AppArmor profile %q requested, but %s", name, NoAppArmorReason)
		}
		ok, err := aa.IsLoaded(name)
		if err != nil {
			return "", fmt.Errorf("AppArmor profile %q: %w", name, err)
		}
		if !ok {
			return "", invalid("AppArmor profile %q is not loaded on this node", name)
		}
		return name, nil
	}
	// RuntimeDefault or unset.
	if !aa.Enabled || sc.GetPrivileged() {
		return "", nil
	}
	if err := aa.ensureDefault(ctx); err != nil {
		return "", err
	}
	return DefaultAppArmorProfile, nil
}

// appArmorDefaultMu makes the check and load of the default profile one step, so
// that containers created together run apparmor_parser once.
var appArmorDefaultMu sync.Mutex

// ensureDefault loads [DefaultAppArmorProfile] unless it is loaded. Its errors wrap
// ErrNoDefaultAppArmor, but for a load that ctx ended, which wraps ctx's error.
func (aa AppArmorHost) ensureDefault(ctx context.Context) error {
	appArmorDefaultMu.Lock()
	defer appArmorDefaultMu.Unlock()
	ok, err := aa.IsLoaded(DefaultAppArmorProfile)
	if err != nil {
		return fmt.Errorf("%w: cannot tell whether %q is loaded: %w", ErrNoDefaultAppArmor, DefaultAppArmorProfile, err)
	}
	if ok {
		return nil
	}
	if aa.Load == nil {
		return fmt.Errorf("%w: %q is not loaded, and this node cannot load profiles", ErrNoDefaultAppArmor, DefaultAppArmorProfile)
	}
	in := AppArmorProfileInput{Name: DefaultAppArmorProfile}
	if aa.ProfileInput != nil {
		in = aa.ProfileInput(DefaultAppArmorProfile)
	}
	text := AppArmorProfile(in)
	if err := aa.Load(ctx, DefaultAppArmorProfile, text); err != nil {
		if ctx.Err() != nil {
			// The request ended, not the node failing: the context's error decides.
			return fmt.Errorf("load the default AppArmor profile %q: %w", DefaultAppArmorProfile, err)
		}
		return fmt.Errorf("%w: %q is not loaded, and loading it failed: %w", ErrNoDefaultAppArmor, DefaultAppArmorProfile, err)
	}
	return nil
}

func (aa AppArmorHost) IsLoaded(name string) (bool, error) {
	if aa.Loaded == nil {
		return false, nil
	}
	return aa.Loaded(name)
}
