package oci

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/cgroups"
)

func TestReadSwap(t *testing.T) {
	cgroups.TestMode = true // the library's file helpers read outside cgroupfs
	t.Cleanup(func() { cgroups.TestMode = false })
	for _, tc := range []struct {
		name      string
		v2        bool
		files     map[string]string
		want      Swap
		ok        bool
		available uint64
		limited   bool
	}{
		{name: "v1 without swap accounting", files: map[string]string{"memory.usage_in_bytes": "4096\n", "memory.limit_in_bytes": "9223372036854771712\n"}},
		{name: "v1, no limit", ok: true, want: Swap{Usage: 1 << 20}, files: map[string]string{
			"memory.usage_in_bytes": "4194304\n", "memory.limit_in_bytes": "9223372036854771712\n",
			"memory.memsw.usage_in_bytes": "5242880\n", "memory.memsw.limit_in_bytes": "9223372036854771712\n"}},
		{name: "v1, limited", ok: true, want: Swap{Usage: 1 << 20, Limit: 64 << 20}, available: 63 << 20, limited: true, files: map[string]string{
			"memory.usage_in_bytes": "4194304\n", "memory.limit_in_bytes": "134217728\n",
			"memory.memsw.usage_in_bytes": "5242880\n", "memory.memsw.limit_in_bytes": "201326592\n"}},
		{name: "v1, swap off: memsw equals memory", ok: true, want: Swap{}, available: 0, files: map[string]string{
			"memory.usage_in_bytes": "4194304\n", "memory.limit_in_bytes": "134217728\n",
			"memory.memsw.usage_in_bytes": "4194304\n", "memory.memsw.limit_in_bytes": "134217728\n"}},
		{name: "v2, no limit", v2: true, ok: true, want: Swap{Usage: 8192}, files: map[string]string{
			"memory.swap.current": "8192\n", "memory.swap.max": "max\n"}},
		{name: "v2, limited and full", v2: true, ok: true, want: Swap{Usage: 1 << 20, Limit: 1 << 20}, limited: true, files: map[string]string{
			"memory.swap.current": "1048576\n", "memory.swap.max": "1048576\n"}},
		{name: "v2 without swap", v2: true, files: map[string]string{"memory.current": "4096\n"}},
		{name: "v1, memory not read", files: map[string]string{"memory.usage_in_bytes": "0\n", "memory.limit_in_bytes": "0\n",
			"memory.memsw.usage_in_bytes": "5242880\n", "memory.memsw.limit_in_bytes": "9223372036854771712\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				writeTestFile(t, filepath.Join(dir, name), content)
			}
			d := statDirs{v2: tc.v2, memory: dir}
			f := &cgroupFiles{buf: make([]byte, 0, 4096)}
			var mem cgroups.MemoryData // as readStats reads it before
			if !tc.v2 {
				var err error
				if mem.Usage, err = f.uint(dir, "memory.usage_in_bytes"); err != nil {
					t.Fatal(err)
				}
				if mem.Limit, err = f.uint(dir, "memory.limit_in_bytes"); err != nil {
					t.Fatal(err)
				}
			}
			got, ok, err := f.readSwap(d, mem)
			if err != nil || ok != tc.ok || got != tc.want {
				t.Fatalf("readSwap = %+v, %v, %v; want %+v, %v", got, ok, err, tc.want, tc.ok)
			}
			if avail, limited := got.Available(); avail != tc.available || limited != tc.limited {
				t.Fatalf("Available = %d, %v; want %d, %v", avail, limited, tc.available, tc.limited)
			}
		})
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
