package oci

import (
	"fmt"

	"github.com/crijournal/crijournal/oci/spec"
)

// Confinement is what this node offers to confine containers, as the verbose Status
// reports it.
type Confinement struct {
	// Seccomp: containers can get seccomp filters (RuntimeDefault, Localhost).
	Seccomp bool `json:"seccomp"`
	// SeccompNote says why not, when not.
	SeccompNote string `json:"seccompNote,omitempty"`
	// AppArmor: the kernel has AppArmor enabled, so Localhost profiles apply.
	AppArmor bool `json:"apparmor"`
	// AppArmorNote says why not, or which profile RuntimeDefault applies.
	AppArmorNote string `json:"apparmorNote,omitempty"`
}

// NodeConfinement reports what the node offers; seccompOff is the node configuration
// saying the node has no seccomp (seccomp_unavailable).
func NodeConfinement(seccompOff bool) Confinement {
	c := Confinement{Seccomp: !seccompOff && kernelSeccomp()}
	switch {
	case seccompOff:
		c.SeccompNote = "seccomp_unavailable is set: RuntimeDefault and Localhost seccomp profiles are refused"
	case !c.Seccomp:
		c.SeccompNote = "the kernel has no seccomp: RuntimeDefault and Localhost seccomp profiles are refused"
	}
	aa := readAppArmor()
	c.AppArmor = aa.Enabled
	c.AppArmorNote = appArmorNote(aa)
	return c
}

// appArmorNote says what RuntimeDefault gets on a node with aa.
func appArmorNote(aa spec.AppArmorHost) string {
	if !aa.Enabled {
		return spec.NoAppArmorReason
	}
	loaded, err := aa.IsLoaded(DefaultAppArmorProfile)
	switch {
	case err != nil:
		return fmt.Sprintf("loaded profiles not readable: %v", err)
	case loaded:
		return fmt.Sprintf("RuntimeDefault and unset apply the profile %q", DefaultAppArmorProfile)
	}
	if _, err := appArmorParser(); err != nil {
		return fmt.Sprintf("the default profile %q is not loaded and cannot be: %v; containers that need it (RuntimeDefault, unset) are refused", DefaultAppArmorProfile, err)
	}
	return fmt.Sprintf("RuntimeDefault and unset apply the profile %q, which the daemon loads for the first container that needs it", DefaultAppArmorProfile)
}
