package oci

import (
	"bufio"
	"os"
	"strings"
)

// kernelSeccomp says whether the kernel filters system calls: /proc/self/status has
// a Seccomp line only then (CONFIG_SECCOMP).
func kernelSeccomp() bool {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "Seccomp:") {
			return true
		}
	}
	return false
}
