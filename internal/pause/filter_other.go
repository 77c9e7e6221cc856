//go:build !amd64

package pause

import "golang.org/x/sys/unix"

// archSyscalls are the system calls of this architecture only that the pause process
// may make: readlinkat, which static glibc calls where there is no readlink (see
// allowedSyscalls; not measured, as amd64's list was).
var archSyscalls = []uintptr{unix.SYS_READLINKAT}
