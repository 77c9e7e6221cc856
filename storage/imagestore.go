package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"
)

// A change of Options.ImageStore while containers exist would leave them without their
// image: their layers' parents are in the image store they were made from, which a store
// opened with another (or none) does not read. Open refuses it, as it refuses turning
// transient store mode off over containers made with it; with no container, the change is
// taken (the images of the old store are no longer seen, and are pulled again), and
// recorded.

// imageStoreFile, in the graph root, names the image store the store was last opened with
// (empty: none). Missing: none, as before image stores were configurable.
const imageStoreFile = "crijournal-image-store"

// checkImageStore refuses to open the store at root with image store want when it was
// last opened with another and containers are recorded (in root, or in runRoot for the
// transient store).
func checkImageStore(root, runRoot, want string) error {
	want = cleanDir(want)
	had, err := recordedImageStore(root)
	if err != nil {
		return err
	}
	if had == want {
		return nil
	}
	if had == "" {
		// Images pulled into the graph root stay readable there (containers/storage
		// reads the graph root's images beside the image store's).
		return nil
	}
	if n := recordedContainers(root, runRoot); n > 0 {
		now := fmt.Sprintf("now %q", want)
		if want == "" {
			now = "now none"
		}
		return fmt.Errorf("the storage at %s records %d containers made while the image store was %s, whose images a store opened with another does not see (image_store is %s): "+
			"set image_store back to %s, or remove the node's pods and containers before changing it", root, n, had, now, had)
	}
	return nil
}

// noteImageStore records the image store the store at root is opened with, when it
// changed; log says what a change leaves behind.
func noteImageStore(root, imageStore string, log *slog.Logger) error {
	imageStore = cleanDir(imageStore)
	had, err := recordedImageStore(root)
	if err != nil || had == imageStore {
		return err
	}
	if had != "" {
		log.Warn("storage: the image store changed: the images pulled into the old one are no longer seen (the kubelet pulls them again); remove it to free its space",
			"old", had, "image_store", imageStore)
	}
	return renameio.WriteFile(filepath.Join(root, imageStoreFile), []byte(imageStore+"\n"), 0o600)
}

// cleanDir is filepath.Clean of a directory, "" staying "".
func cleanDir(dir string) string {
	if dir == "" {
		return ""
	}
	return filepath.Clean(dir)
}

// recordedImageStore returns the image store recorded in root ("" for none).
func recordedImageStore(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, imageStoreFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("image store record: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// recordedContainers counts the containers containers/storage records under root
// (<driver>-containers/containers.json) and runRoot (volatile-containers.json, the
// transient store's), reading the files: the store is not open yet.
func recordedContainers(root, runRoot string) int {
	n := 0
	for _, pattern := range []string{
		filepath.Join(root, "*-containers", "containers.json"),
		filepath.Join(runRoot, "*-containers", "volatile-containers.json"),
	} {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			var cs []json.RawMessage
			if json.Unmarshal(b, &cs) == nil {
				n += len(cs)
			}
		}
	}
	return n
}
