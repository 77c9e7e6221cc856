package pause

import "golang.org/x/sys/unix"

// archSyscalls are the system calls of amd64 only that the pause process may make.
var archSyscalls = []uintptr{unix.SYS_ARCH_PRCTL}
