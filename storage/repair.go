package storage

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/renameio/v2"
	cstorage "go.podman.io/storage"
)

// What an unclean stop (a power cut, a kernel panic, a killed daemon) can leave in the
// store, and what Open does about it before anything else uses the store:
//
//   - a layer flagged incomplete (its unpacking was cut short): containers/storage
//     deletes it itself when it loads its layer records;
//   - an image that names a layer which is gone or broken (its directory lost, its
//     parent missing), or whose manifest or config is missing or short: the image is
//     removed, so that ImageStatus says it is absent and the kubelet pulls it again,
//     instead of its containers failing to start;
//   - a layer directory that no record names, or a layer that no image and no container
//     uses: removed (nothing is being made while Open runs).
//
// Storage containers are never removed here: each belongs to a journal record
// (StepContainerStorage, StepImageVolume), whose undo deletes it when the kubelet removes
// the container, and which finds it gone without error. A damaged one is logged and left
// to it, and so are its layer and its image.
//
// Only a lost page cache damages the store so (a killed daemon leaves incomplete layers,
// which containers/storage removes, and layers of failed pulls, which Open removes, see
// pullclean.go), and a lost page cache means a reboot. So the check runs at the first Open
// of each boot: the graph root's checkedBootFile holds the boot ID (the kernel's, new at
// every boot) of the last check that repaired all it found. Neither a clean-stop
// marker nor a change of the journal's schema is needed, and a restart of the daemon does
// not pay for the check again. The check is containers/storage's Check with the quick
// checks only (every layer mounted and unmounted, the records' data items read); reading
// every layer back to digest it (CheckMost) would cost a read of every image. See
// BenchmarkRepair for the costs.

// checkedBootFile, in the graph root, holds the boot ID of the last check (see above).
// A torn, stale or lost file only makes the next Open check again.
const checkedBootFile = "crijournal-checked-boot"

// bootIDFile is where the kernel gives the boot ID; a variable for the tests.
var bootIDFile = "/proc/sys/kernel/random/boot_id"

// checkedThisBoot returns the boot ID and whether the store under root was checked in
// this boot. Without a boot ID, the store is checked at every Open.
func checkedThisBoot(root string) (boot string, checked bool) {
	b, err := os.ReadFile(bootIDFile)
	if boot = strings.TrimSpace(string(b)); err != nil || boot == "" {
		return "", false
	}
	prev, err := os.ReadFile(filepath.Join(root, checkedBootFile))
	return boot, err == nil && strings.TrimSpace(string(prev)) == boot
}

// noteChecked records that the store under root was checked in boot. renameio writes it
// whole or not at all (temporary file, fsync, rename), so a reader finds a boot ID or no
// file, never a partial one.
func noteChecked(root, boot string) error {
	if boot == "" {
		return nil
	}
	return renameio.WriteFile(filepath.Join(root, checkedBootFile), []byte(boot+"\n"), 0o600)
}

// checkOnce runs repair at the first Open of a boot (see above) and logs what it did.
func (s *Store) checkOnce(log *slog.Logger) {
	root := s.st.GraphRoot()
	boot, checked := checkedThisBoot(root)
	if checked {
		return
	}
	start := time.Now()
	done, err := s.repair()
	logRepair(log, done, err)
	log.Info("storage: checked after a boot", "root", root, "duration", time.Since(start),
		"images_removed", len(done.Images), "layers_removed", len(done.Layers), "kept_for_the_journal", len(done.Kept))
	if err != nil {
		return // the next Open checks again
	}
	if err := noteChecked(root, boot); err != nil {
		log.Warn("storage: the check's mark was not written; the next start checks again", "err", err)
	}
}

// repairCheck is the check Open runs: everything but the layers' contents.
func repairCheck() *cstorage.CheckOptions {
	unreferenced := time.Duration(0) // nothing is being made while Open runs
	return &cstorage.CheckOptions{
		LayerUnreferencedMaximumAge: &unreferenced,
		LayerMountable:              true,
		LayerData:                   true,
		ImageData:                   true,
		ContainerData:               true,
	}
}

// Repaired is what repair removed, and what it found damaged and left to the journal.
type Repaired struct {
	Images map[string][]error  // removed images, with what was wrong with them
	Names  map[string][]string // the removed images' names
	Layers map[string][]error  // removed layers, those of removed images among them
	// Kept are damaged containers, and images and layers they use, left in place: the
	// journal's records own the containers.
	Kept map[string][]error
}

// repair checks the store and removes what is damaged (see above); it returns what it did.
// The caller holds the store for itself: no pull and no creation runs.
func (s *Store) repair() (Repaired, error) {
	report, err := s.st.Check(repairCheck())
	if err != nil {
		return Repaired{}, fmt.Errorf("check the image store: %w", err)
	}
	containers, err := s.st.Containers()
	if err != nil {
		return Repaired{}, fmt.Errorf("check the image store: %w", err)
	}
	layers, err := s.st.Layers()
	if err != nil {
		return Repaired{}, fmt.Errorf("check the image store: %w", err)
	}
	done := Repaired{Images: map[string][]error{}, Names: map[string][]string{}, Layers: map[string][]error{}, Kept: map[string][]error{}}
	keep(&report, containers, layers, done.Kept)
	maps.Copy(done.Images, report.Images)
	maps.Copy(done.Layers, report.Layers)
	if len(report.Images)+len(report.Layers) == 0 {
		return done, nil
	}
	for id := range report.Images {
		if img, err := s.st.Image(id); err == nil {
			done.Names[id] = img.Names
		}
	}
	errs := s.st.Repair(report, &cstorage.RepairOptions{RemoveContainers: false})
	// What is still there was not removed.
	for id := range done.Images {
		if _, err := s.st.Image(id); err == nil {
			delete(done.Images, id)
			delete(done.Names, id)
		}
	}
	for id := range done.Layers {
		if _, err := s.st.Layer(id); err == nil {
			delete(done.Layers, id)
		}
	}
	return done, errors.Join(errs...)
}

// keep takes out of report the damaged containers, the layers they stand on (their own
// and its ancestors) and their images, and records them in kept: they are the journal's to
// remove (see above).
func keep(report *cstorage.CheckReport, containers []cstorage.Container, layers []cstorage.Layer, kept map[string][]error) {
	for id, errs := range report.Containers {
		kept["container "+id] = errs
	}
	clear(report.Containers)
	parent := make(map[string]string, len(layers))
	for _, l := range layers {
		parent[l.ID] = l.Parent
	}
	for _, c := range containers {
		if errs, ok := report.Images[c.ImageID]; ok {
			kept["image "+c.ImageID+" (container "+c.ID+" uses it)"] = errs
			delete(report.Images, c.ImageID)
		}
		seen := map[string]bool{}
		for id := c.LayerID; id != "" && !seen[id]; id = parent[id] {
			seen[id] = true
			if errs, ok := report.Layers[id]; ok {
				kept["layer "+id+" (container "+c.ID+" stands on it)"] = errs
				delete(report.Layers, id)
			}
		}
	}
}

// logRepair logs what repair did (see Open).
func logRepair(log *slog.Logger, done Repaired, err error) {
	for id, problems := range done.Images {
		log.Warn("storage: removed an image that an unclean stop damaged; the kubelet pulls it again",
			"image", id, "names", done.Names[id], "problems", errors.Join(problems...))
	}
	for id, problems := range done.Layers {
		log.Warn("storage: removed a layer that an unclean stop left damaged or unused", "layer", id, "problems", errors.Join(problems...))
	}
	for what, problems := range done.Kept {
		log.Warn("storage: damaged, left for the journal's records that own it (removed with its container)", "what", what, "problems", errors.Join(problems...))
	}
	if err != nil {
		log.Warn("storage: the check at start did not repair everything; the next start tries again", "err", err)
	}
}
