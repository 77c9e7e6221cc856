package oci

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// Pressure stall information (PSI) of a cgroup v2: the share of time some (or all) of
// its tasks waited for CPU, memory or I/O, from cpu.pressure, memory.pressure and
// io.pressure. The kubelet reports it as the CRI's CpuUsage.psi, MemoryUsage.psi and
// IoUsage.psi (its KubeletPSI feature). cgroup v1 has no such files: the figures stay nil.

// PSI is a cgroup's pressure stall information for CPU, memory and I/O (totals in
// microseconds, as the kernel counts them); a resource whose
// file the kernel does not give (cgroup v1, a kernel without CONFIG_PSI, or psi=0 on its
// command line) is nil.
type PSI struct {
	CPU, Memory, IO *cgroups.PSIStats
}

// readPSI reads the three pressure files of a cgroup v2 directory into the library's
// places for them (CpuStats.PSI, MemoryStats.PSI, BlkioStats.PSI). A missing file, or
// one the kernel refuses to read (EOPNOTSUPP when PSI is off), leaves its place nil.
func readPSI(f *cgroupFiles, dir string, cs *cgroups.Stats) error {
	for _, r := range []struct {
		file string
		dst  **cgroups.PSIStats
	}{{"cpu.pressure", &cs.CpuStats.PSI}, {"memory.pressure", &cs.MemoryStats.PSI}, {"io.pressure", &cs.BlkioStats.PSI}} {
		b, err := f.read(dir, r.file)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) {
			continue
		}
		if err != nil {
			return err
		}
		st, err := parsePSI(b)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", dir, r.file, err)
		}
		*r.dst = st
	}
	return nil
}

// parsePSI parses a pressure file: a "some" line and, except for cpu.pressure on
// kernels before 5.13, a "full" one, each "avg10=0.12 avg60=0.05 avg300=0.01
// total=1234" (total in microseconds). Unknown lines and keys are skipped, as a newer
// kernel may add some.
func parsePSI(b []byte) (*cgroups.PSIStats, error) {
	var st cgroups.PSIStats
	for line := range bytes.Lines(b) {
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		var d *cgroups.PSIData
		switch string(fields[0]) {
		case "some":
			d = &st.Some
		case "full":
			d = &st.Full
		default:
			continue
		}
		for _, kv := range fields[1:] {
			k, v, ok := bytes.Cut(kv, []byte("="))
			if !ok {
				return nil, fmt.Errorf("malformed field %q", kv)
			}
			var err error
			switch string(k) {
			case "avg10":
				d.Avg10, err = strconv.ParseFloat(string(v), 64)
			case "avg60":
				d.Avg60, err = strconv.ParseFloat(string(v), 64)
			case "avg300":
				d.Avg300, err = strconv.ParseFloat(string(v), 64)
			case "total":
				d.Total, err = strconv.ParseUint(string(v), 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("field %q: %w", kv, err)
			}
		}
	}
	return &st, nil
}
