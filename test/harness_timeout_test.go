package test

// Helpers of the sandbox timeout tests: a RunPodSandbox that times out while
// the network is being set up, and its retry that gets the cached sandbox.
