// Package spec owns the pure building of an OCI runtime spec from a container's CRI
// config: no process is started and no file written. [Build] turns a [SpecInput] into
// a spec by the rules of package oci's documentation (args, env, mounts, namespaces,
// resources, capabilities, devices, and the choice of the seccomp filter and AppArmor
// profile), with a [Host] that holds the facts about the node and the lookups that
// read it: the daemon's capabilities and oom_score_adj, the cgroup hierarchy, the
// container's user from its root filesystem, the loading of the default AppArmor
// profile. Package oci reads those from the node (oci.Spec); tests give their own.
//
// Every refusal of a configuration wraps [ErrInvalidSpec]; a default AppArmor profile
// that is needed and cannot be loaded is [ErrNoDefaultAppArmor].
package spec
