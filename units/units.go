// Package units asks systemd for the cgroups of the systemd cgroup driver
// (cgroup_manager = "systemd"): a pod's slice, and the transient scopes of a pod's pause
// process, of each container (made by runc --systemd-cgroup) and of each container's
// conmon. Units are made and stopped with the driver library runc and the kubelet use
// (github.com/opencontainers/cgroups/systemd); whether a unit is still there is read over
// D-Bus with github.com/coreos/go-systemd, because the library's stop reports success
// whatever systemd answered.
//
// # Names
//
// A scope is named by a systemd cgroupsPath, "<slice>:<prefix>:<name>" (runc's form,
// see [Path]): the unit <prefix>-<name>.scope in <slice>, whose cgroup is
// <expanded slice>/<prefix>-<name>.scope in every hierarchy. crijournal's are
//
//	<pod slice>:crijournal:<sandbox id>          the pause process (netns.PauseProgram)
//	<pod slice>:crijournal:<container id>        the container (runc)
//	<pod slice>:crijournal-conmon:<container id> the container's conmon (oci)
//
// # Absence of an answer
//
// [Stop] is an undo: it succeeds only when systemd said the unit is inactive or not
// loaded (a unit that is gone is done). systemd that cannot be reached, or that has not
// finished stopping the unit, is an error, and the journal keeps the step and retries
// it (DESIGN §6).
package units

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/cgroups/systemd"
)

// Prefixes of the scopes crijournal names (the middle part of a [Path]).
const (
	// Prefix starts the scopes of containers and pause processes: crijournal-<id>.scope.
	Prefix = "crijournal"
	// ConmonPrefix starts the scopes of conmons: crijournal-conmon-<id>.scope.
	ConmonPrefix = "crijournal-conmon"
)

// DefaultSlice is the slice of pods whose sandbox names no cgroup_parent. systemd makes
// it when the first unit in it is started; it is shared by such pods, like the cgroupfs
// driver's /crijournal, and stays.
const DefaultSlice = "crijournal.slice"

// Timeout bounds one conversation with systemd (start or stop a unit and wait for the
// job), when the caller's context has no earlier deadline.
const Timeout = 30 * time.Second

// ErrInvalid is returned for a slice name or a cgroupsPath that systemd cannot take.
var ErrInvalid = errors.New("invalid systemd unit name")

// Path is a systemd cgroupsPath: the scope <Prefix>-<Name>.scope in Slice.
type Path struct {
	Slice, Prefix, Name string
}

// IsPath reports whether p is a systemd cgroupsPath ("slice:prefix:name") rather than a
// cgroupfs path (absolute).
func IsPath(p string) bool {
	return !strings.HasPrefix(p, "/") && strings.Count(p, ":") == 2
}

// Parse reads a systemd cgroupsPath, "slice:prefix:name".
func Parse(p string) (Path, error) {
	parts := strings.Split(p, ":")
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return Path{}, fmt.Errorf("cgroups path %q: %w: want slice:prefix:name", p, ErrInvalid)
	}
	sp := Path{Slice: parts[0], Prefix: parts[1], Name: parts[2]}
	if err := CheckSlice(sp.Slice); err != nil {
		return Path{}, err
	}
	for _, s := range []string{sp.Prefix, sp.Name} {
		if strings.ContainsAny(s, "/\\ ") || s == "." || s == ".." {
			return Path{}, fmt.Errorf("cgroups path %q: %w", p, ErrInvalid)
		}
	}
	return sp, nil
}

// String is the cgroupsPath as runc takes it.
func (p Path) String() string { return p.Slice + ":" + p.Prefix + ":" + p.Name }

// Unit is the scope's unit name.
func (p Path) Unit() string { return p.Prefix + "-" + p.Name + ".scope" }

// Dir is the scope's cgroup, relative to the root of each hierarchy (as seen in the
// daemon's cgroup namespace), such as /kubepods.slice/kubepods-pod1.slice/crijournal-c1.scope.
func (p Path) Dir() (string, error) {
	s, err := systemd.ExpandSlice(p.Slice)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return path.Join(s, p.Unit()), nil
}

// CheckSlice refuses a name that is not a slice's ("<name>.slice", no "/", its parts
// between dashes not empty).
func CheckSlice(name string) error {
	if _, err := systemd.ExpandSlice(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// SliceName is the slice a cgroup_parent names: a slice name ("kubepods-pod1.slice"), or
// the slice's cgroup directory, which a kubelet with cgroupDriver: systemd sends
// ("/kubepods.slice/kubepods-pod1.slice"; containerd and CRI-O take its last element
// too). A directory must be the one systemd gives its last element: a path that is not
// a slice's, or names another slice's nesting, is refused.
func SliceName(parent string) (string, error) {
	if !strings.Contains(parent, "/") {
		return parent, CheckSlice(parent)
	}
	name := path.Base(parent)
	dir, err := systemd.ExpandSlice(name)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrInvalid, parent, err)
	}
	if dir != parent {
		return "", fmt.Errorf("%w: %q: the directory of %s is %s", ErrInvalid, parent, name, dir)
	}
	return name, nil
}

// ScopePath returns the cgroupsPath of the scope <prefix>-<id>.scope in the pod's slice
// parent (a cgroup_parent, see SliceName; "" for DefaultSlice).
func ScopePath(parent, prefix, id string) (string, error) {
	if parent == "" {
		parent = DefaultSlice
	}
	parent, err := SliceName(parent)
	if err != nil {
		return "", err
	}
	p := Path{Slice: parent, Prefix: prefix, Name: id}
	if _, err := Parse(p.String()); err != nil {
		return "", err
	}
	return p.String(), nil
}

// Running reports whether systemd runs this process's namespaces: the systemd driver
// needs it as PID 1.
func Running() bool { return systemd.IsRunningSystemd() }

// scopeManager is the library's manager of the scope at p.
func scopeManager(p Path) (cgroups.Manager, error) {
	m, err := manager.New(&cgroups.Cgroup{Systemd: true, Parent: p.Slice, ScopePrefix: p.Prefix, Name: p.Name,
		Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return nil, fmt.Errorf("systemd scope %s: %w", p.Unit(), err)
	}
	return m, nil
}

// StartScope starts the transient scope at p (Delegate=yes, accounting on) with pid in
// it: the library's Apply, as runc does for a container.
func StartScope(p Path, pid int) error {
	m, err := scopeManager(p)
	if err != nil {
		return err
	}
	if err := m.Apply(pid); err != nil {
		return fmt.Errorf("start systemd scope %s with process %d: %w", p.Unit(), pid, err)
	}
	return nil
}

// StopScope stops the scope at p and removes what is left of its cgroup (see Stop).
func StopScope(ctx context.Context, p Path) error {
	m, err := scopeManager(p)
	if err != nil {
		return err
	}
	return stop(ctx, p.Unit(), m)
}

// sliceManager is the library's manager of slice name (in its parent slice, by name).
func sliceManager(name string) (cgroups.Manager, error) {
	if err := CheckSlice(name); err != nil {
		return nil, err
	}
	m, err := manager.New(&cgroups.Cgroup{Systemd: true, Parent: ParentSlice(name), Name: name,
		Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return nil, fmt.Errorf("systemd slice %s: %w", name, err)
	}
	return m, nil
}

// ParentSlice is the slice that holds slice name: a-b-c.slice is in a-b.slice, a.slice
// in the root slice, -.slice.
func ParentSlice(name string) string {
	base := strings.TrimSuffix(name, ".slice")
	if i := strings.LastIndex(base, "-"); i > 0 {
		return base[:i] + ".slice"
	}
	return "-.slice"
}

// StartSlice starts slice name as a transient unit (the library's Apply without a
// process, as the kubelet makes a pod's slice). A slice that exists is success.
func StartSlice(name string) error {
	m, err := sliceManager(name)
	if err != nil {
		return err
	}
	if err := m.Apply(-1); err != nil {
		return fmt.Errorf("start systemd slice %s: %w", name, err)
	}
	return nil
}

// StopSlice stops slice name, then removes what is left of its cgroup (see stop). A
// slice that still holds active units of others (pods given the same cgroup_parent) is
// not stopped, which would stop them too: that is an error, and the journal retries the
// undo until the slice is empty.
func StopSlice(ctx context.Context, name string) error {
	m, err := sliceManager(name)
	if err != nil {
		return err
	}
	if err := checkEmpty(ctx, name); err != nil {
		return err
	}
	return stop(ctx, name, m)
}

// checkEmpty fails unless slice name holds no active unit.
func checkEmpty(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	conn, err := dial(ctx)
	if err != nil {
		return fmt.Errorf("stop systemd slice %s: systemd not reachable: %w", name, err)
	}
	defer conn.Close()
	prop, err := conn.GetUnitPropertyContext(ctx, name, "ConsistsOf")
	if err != nil {
		return fmt.Errorf("stop systemd slice %s: ask systemd: %w", name, err)
	}
	children, _ := prop.Value.Value().([]string)
	var busy []string
	for _, c := range children {
		state, err := activeState(ctx, conn, c)
		if err != nil {
			return fmt.Errorf("stop systemd slice %s: %w", name, err)
		}
		if state != "" {
			busy = append(busy, c)
		}
	}
	if len(busy) > 0 {
		return fmt.Errorf("stop systemd slice %s: it still holds %s", name, strings.Join(busy, ", "))
	}
	return nil
}

// stop stops unit through the library (which also removes the cgroup directories
// systemd leaves in v1 hierarchies) and then asks systemd whether the unit is gone:
// only "inactive" or "not loaded" is success. The library's own stop reports success
// whatever systemd answered, so an unreachable systemd would look like a unit gone.
func stop(ctx context.Context, unit string, m cgroups.Manager) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	conn, err := dial(ctx)
	if err != nil {
		return fmt.Errorf("stop systemd unit %s: systemd not reachable: %w", unit, err)
	}
	defer conn.Close()
	if active, err := activeState(ctx, conn, unit); err != nil {
		return fmt.Errorf("stop systemd unit %s: %w", unit, err)
	} else if active == "" {
		return removeLeft(unit, m) // nothing to stop: only its directories may be left
	}
	destroyErr := m.Destroy()
	active, err := activeState(ctx, conn, unit)
	if err != nil {
		return fmt.Errorf("stop systemd unit %s: %w", unit, err)
	}
	if active != "" {
		return fmt.Errorf("stop systemd unit %s: still %s after the stop (%v)", unit, active, destroyErr)
	}
	if destroyErr != nil {
		return fmt.Errorf("stop systemd unit %s: %w", unit, destroyErr)
	}
	return nil
}

// removeLeft removes the cgroup directories of a unit systemd no longer has (v1
// hierarchies systemd does not manage keep them).
func removeLeft(unit string, m cgroups.Manager) error {
	if err := cgroups.RemovePaths(m.GetPaths()); err != nil {
		return fmt.Errorf("remove cgroup of systemd unit %s: %w", unit, err)
	}
	return nil
}

// Active reports whether systemd has unit, in any state but inactive: a definite
// answer, or an error when systemd cannot be asked.
func Active(ctx context.Context, unit string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	conn, err := dial(ctx)
	if err != nil {
		return false, fmt.Errorf("systemd unit %s: systemd not reachable: %w", unit, err)
	}
	defer conn.Close()
	state, err := activeState(ctx, conn, unit)
	if err != nil {
		return false, fmt.Errorf("systemd unit %s: %w", unit, err)
	}
	return state != "", nil
}

// bus is what this package asks systemd over D-Bus: a *sddbus.Conn (a fake in tests).
type bus interface {
	ListUnitsByNamesContext(ctx context.Context, units []string) ([]sddbus.UnitStatus, error)
	ResetFailedUnitContext(ctx context.Context, name string) error
	GetUnitPropertyContext(ctx context.Context, unit, propertyName string) (*sddbus.Property, error)
	Close()
}

// dial connects to systemd's D-Bus (the system bus, or systemd's private socket).
var dial = func(ctx context.Context) (bus, error) {
	c, err := sddbus.NewWithContext(ctx)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// activeState returns unit's ActiveState, "" for a unit that is gone (not loaded, or
// inactive; a failed one is reset so that systemd forgets it).
func activeState(ctx context.Context, conn bus, unit string) (string, error) {
	st, err := conn.ListUnitsByNamesContext(ctx, []string{unit})
	if err != nil {
		return "", fmt.Errorf("ask systemd: %w", err)
	}
	for _, u := range st {
		if u.Name != unit {
			continue
		}
		switch {
		case u.ActiveState == "failed":
			if err := conn.ResetFailedUnitContext(ctx, unit); err != nil {
				return "", fmt.Errorf("reset failed unit: %w", err)
			}
			return "", nil
		case u.ActiveState == "inactive", u.LoadState == "not-found":
			return "", nil
		default:
			return u.ActiveState, nil
		}
	}
	return "", nil // systemd lists every name asked for; one it does not know is gone
}

// ErrNotActive is returned by SetSlice for a slice systemd does not have (active).
var ErrNotActive = errors.New("systemd unit not active")

// SetSlice sets res on slice name, an active slice: systemd's unit properties (CPU
// weight or shares, quota, memory limit; kept by systemd for the unit's life) and the
// cgroup files, through the library's Set, as the kubelet sets its pods' slices. It
// does not start a slice systemd does not have: that is ErrNotActive.
func SetSlice(ctx context.Context, name string, res *cgroups.Resources) error {
	active, err := Active(ctx, name)
	if err != nil {
		return err
	}
	if !active {
		return fmt.Errorf("systemd slice %s: %w", name, ErrNotActive)
	}
	m, err := sliceManager(name)
	if err != nil {
		return err
	}
	if err := m.Set(res); err != nil {
		return fmt.Errorf("set the limits of systemd slice %s: %w", name, err)
	}
	return nil
}
