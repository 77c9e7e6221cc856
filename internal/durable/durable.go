// Package durable owns the one file-system step that several packages need to survive a
// power cut and no library in the module offers: fsyncing a directory, so that the entries
// just made, renamed or removed in it are on disk (a file's own fsync does not cover its
// name). Whole files are written with github.com/google/renameio/v2.
package durable

import "os"

// SyncDir fsyncs the directory dir.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
