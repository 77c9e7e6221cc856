package oci

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fscommon"
)

// TestCgroupFilesParseAsTheLibrary: cgroupFiles reads and parses a file as the library's
// reader and parsers did (cgroups.ReadFile, fscommon.GetCgroupParamUint, ParseKeyValue
// on every line): the same value, or an error where the library gave one.
func TestCgroupFilesParseAsTheLibrary(t *testing.T) {
	cgroups.TestMode = true // the library reads files outside /sys/fs/cgroup
	t.Cleanup(func() { cgroups.TestMode = false })
	long := strings.Repeat("key_with_a_long_name 18446744073709551615\n", 300) // > the first buffer
	for _, tt := range []struct {
		name, content string
	}{
		{"number", "123456789\n"},
		{"number without newline", "42"},
		{"spaces around", "  7 \n"},
		{"max", "max\n"},
		{"negative", "-1\n"},
		{"below MinInt64", "-99999999999999999999\n"},
		{"above MaxUint64", "99999999999999999999\n"},
		{"not a number", "x\n"},
		{"empty", ""},
		{"flat keyed", "cache 4096\nrss 9999\ntotal_rss 1048576\n"},
		{"flat keyed without newline", "user 10\nsystem 5"},
		{"flat keyed negative", "a -3\n"},
		{"flat keyed, a bad value", "a 1\nb x\n"},
		{"flat keyed, no value", "a\n"},
		{"flat keyed, empty value", "a \n"},
		{"flat keyed, empty line", "a 1\n\nb 2\n"},
		{"larger than the buffer", long},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "f"), []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			f := &cgroupFiles{}
			wantS, wantErr := cgroups.ReadFile(dir, "f")
			gotS, err := f.string(dir, "f")
			if wantErr != nil {
				t.Fatalf("the library's read: %v", wantErr)
			}
			if gotS != wantS || err != nil {
				t.Errorf("string = %d bytes, %v; library %d bytes", len(gotS), err, len(wantS))
			}
			wantU, wantErr := fscommon.GetCgroupParamUint(dir, "f")
			gotU, err := f.uint(dir, "f")
			if gotU != wantU || (err == nil) != (wantErr == nil) {
				t.Errorf("uint = %d, %v; library %d, %v", gotU, err, wantU, wantErr)
			}
			wantKV, wantErr := libraryKeyValues(wantS)
			gotKV, err := f.keyValues(dir, "f")
			if (err == nil) != (wantErr == nil) || (err == nil && !reflect.DeepEqual(gotKV, wantKV)) {
				t.Errorf("keyValues = %v, %v; library %v, %v", gotKV, err, wantKV, wantErr)
			}
			if n, err := f.lines(dir, "f"); err != nil || n != uint64(strings.Count(wantS, "\n")) {
				t.Errorf("lines = %d, %v; want %d", n, err, strings.Count(wantS, "\n"))
			}
		})
	}
}

// libraryKeyValues parses a flat-keyed file as readKeyValues did before cgroupFiles.
func libraryKeyValues(s string) (map[string]uint64, error) {
	kv := map[string]uint64{}
	for line := range strings.Lines(s) {
		k, v, err := fscommon.ParseKeyValue(strings.TrimSuffix(line, "\n"))
		if err != nil {
			return nil, err
		}
		kv[k] = v
	}
	return kv, nil
}

// TestCgroupFilesMissing: a missing file or directory is fs.ErrNotExist, as with the
// library, so that a controller that is not there reads as zero figures.
func TestCgroupFilesMissing(t *testing.T) {
	f := &cgroupFiles{}
	dir := t.TempDir()
	for _, path := range [][2]string{{dir, "nothing"}, {filepath.Join(dir, "gone"), "memory.stat"}} {
		if _, err := f.uint(path[0], path[1]); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("uint of %s/%s: %v, want fs.ErrNotExist", path[0], path[1], err)
		}
		if _, err := f.keyValues(path[0], path[1]); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("keyValues of %s/%s: %v, want fs.ErrNotExist", path[0], path[1], err)
		}
	}
}
