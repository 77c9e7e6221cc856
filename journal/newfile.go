package journal

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/crijournal/crijournal/internal/durable"
)

// A new journal file must survive a power cut as soon as its first commit has: bbolt
// fsyncs the file it creates, not the directory entries that name it, so a cut could take
// the file, and every commit in it, with the entry. newPath notes, before Open creates
// anything, which directories on the way to the file are missing; syncNewPath fsyncs the
// directories that got new entries once the file exists.

// newPath returns the directories that get a new entry when path is created: the
// directory of path when path is missing, and each existing ancestor of a missing
// directory. Empty when path exists.
func newPath(path string) []string {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var dirs []string
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		dirs = append(dirs, dir)
		if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) || dir == filepath.Dir(dir) {
			return dirs
		}
	}
}

// syncNewPath fsyncs dirs (newPath's answer), deepest first.
func syncNewPath(dirs []string) error {
	for _, dir := range dirs {
		if err := durable.SyncDir(dir); err != nil {
			return err
		}
	}
	return nil
}
