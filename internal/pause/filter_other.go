//go:build !amd64

package pause

// archSyscalls are the system calls of this architecture only that the pause process
// may make: none.
var archSyscalls []uintptr
