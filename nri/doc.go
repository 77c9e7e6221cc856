// Package nri is crijournal's side of the Node Resource Interface (NRI,
// github.com/containerd/nri): it runs the adaptation (pkg/adaptation) that NRI plugins
// connect to, converts the CRI's and the journal's objects to NRI's, and owns the two
// creation steps that tell the plugins about a pod or a container, each with an undo.
//
// It is a package of its own (not part of server, netns or oci) because NRI is a resource
// of its own in the journal's sense: telling plugins about a pod or a container is an
// effect on the outside world (a plugin may have set up resources for it) that must be
// undone, once, by the one undo mechanism, after a failed request, a crash, or the expiry
// of a cached creation. Those undos run from the journal's registry (RegisterUndos), so
// they live beside the steps, as netns's and oci's do.
//
// # Steps
//
// StepPod (SandboxStep): RunPodSandbox is sent to the plugins, after the network and
// before the sandbox settles. Its undo sends StopPodSandbox, unless the record has
// MarkerStopped, then RemovePodSandbox. Args: ArgPod, the NRI pod (protobuf JSON).
//
// StepContainer (ContainerStep): CreateContainer is sent to the plugins before the
// runtime creates the container; their adjustment is applied to the spec the runtime
// gets (Adjust). Its undo sends StopContainer, unless the record has MarkerStopped, then
// RemoveContainer. Args: ArgPod and ArgContainer (the container as the plugins were
// asked about it).
//
// # Once only
//
// StopPodSandbox and StopContainer are sent when the sandbox or container stops (a
// container that exits by itself included); the caller commits MarkerStopped with the
// state change, so the undo, which runs at removal, does not send them again, also
// across a restart. Remove is sent by the undo only, and the journal marks an undone
// step, so it is not sent twice either. A crash between a send and its commit sends it
// again: plugins see an event at least once, never zero times.
//
// # Synchronization
//
// A plugin that connects is synchronized with what the Source lists: the journal's
// created and cached pods and containers, after recovery (Start is called once
// recovery has run). A creation holds Block from before its NRI step until its record
// has settled; a plugin's synchronization waits for those, and a creation that begins
// while one runs waits for it. So a plugin either is registered before a creation's
// event and gets it, or finds the settled creation in its synchronization: never both,
// never neither (containerd does the same).
//
// While no plugin can be registered (Plugged: nothing in the plugin directory at Start,
// no external plugin synchronized since), a creation's NRI step has nobody to tell: it is
// recorded done without a commit of its own (journal.Noted) rather than journaled before
// it acts, since it does not act; its undo runs at removal all the same, for the plugins
// that have learnt of the pod or container by their synchronization since.
package nri
