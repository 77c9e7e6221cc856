package pause

import "golang.org/x/sys/unix"

// archSyscalls are the system calls of amd64 only that the pause process may make: the
// Go runtime's and static glibc's arch_prctl, and static glibc's readlink (see
// allowedSyscalls).
var archSyscalls = []uintptr{unix.SYS_ARCH_PRCTL, unix.SYS_READLINK}
