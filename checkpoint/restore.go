package checkpoint

// The restore side: a checkpoint archive (or an OCI image holding its files) read, checked
// and imported for a new container, whose root filesystem gets the archive's changes.
// CreateContainer imports (StepImport); StartContainer has the runtime restore the
// processes from the imported images with CRIU (oci.StepRestore).

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/storage/pkg/archive"

	"github.com/crijournal/crijournal/journal"
)

// StepImport imports a checkpoint archive for a container restored from it: its files
// (CRIU's images first of all) extracted to the step's directory, the restore directory,
// and its root filesystem changes (rootfs-diff.tar, deleted.files) applied to the new
// container's root filesystem. Its undo removes the restore directory; the changes to
// the root filesystem go with it, undone by the storage step before it. Args: ArgDir.
// The string is stored in the journal: never change it.
const StepImport journal.StepKind = "checkpoint-import"

// StageImport is the stage of StepImport, as inspect shows it.
const StageImport = "checkpoint import"

// ArgDir is StepImport's restore directory.
const ArgDir = "dir"

// Files the daemon keeps in a restore directory beside the archive's.
const (
	// SpecFile is the restored container's OCI spec, made at CreateContainer and given
	// to the runtime at StartContainer.
	SpecFile = "restore-spec.json"
	// WorkDir is CRIU's work directory during the restore: its restore.log.
	WorkDir = "restore-work"
)

// restoreDirMark is in the name of every restore directory, so that an undo never
// removes a directory that a corrupt record names.
const restoreDirMark = ".restore"

// Annotations of an OCI image that holds a checkpoint archive's files: CRI-O's, which
// its documentation has users set with buildah, and checkpointctl's.
const (
	AnnotationCRIOName = "io.kubernetes.cri-o.annotations.checkpoint.name"
	AnnotationName     = metadata.CheckpointAnnotationName
)

// IsCheckpointImage reports whether an OCI image's manifest annotations mark it as one
// holding a checkpoint archive's files.
func IsCheckpointImage(annotations map[string]string) bool {
	_, crio := annotations[AnnotationCRIOName]
	_, criu := annotations[AnnotationName]
	return crio || criu
}

// ErrNotCheckpoint is returned for an archive or image that is not a checkpoint of a
// container: one that lacks CRIU's images, config.dump or spec.dump, or is no tar.
var ErrNotCheckpoint = errors.New("not a container checkpoint")

// Archive is what a restore needs to know of a checkpoint before it imports it.
type Archive struct {
	// Config is config.dump: the checkpointed container's name, image and runtime.
	Config metadata.ContainerConfig
	// Spec is spec.dump: the checkpointed container's OCI spec.
	Spec specs.Spec
}

// metadataLimit bounds the size of config.dump and spec.dump read from an archive.
const metadataLimit = 4 << 20

// ReadArchive reads the tar stream r of a checkpoint archive (or an image layer holding
// its files) until it has found its metadata, which it returns; name names it in errors. A stream
// that is not a tar, or lacks CRIU's images, config.dump or spec.dump, gives an error
// wrapping ErrNotCheckpoint.
func ReadArchive(r io.Reader, name string) (Archive, error) {
	var a Archive
	var config, spec, images bool
	tr := tar.NewReader(r)
	for !config || !spec || !images { // what follows is CRIU's images: not read here
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Archive{}, fmt.Errorf("%w: %s is not a tar archive: %v", ErrNotCheckpoint, name, err)
		}
		switch entryName(h.Name) {
		case metadata.ConfigDumpFile:
			if err := readJSON(tr, h, &a.Config); err != nil {
				return Archive{}, fmt.Errorf("%w: %s: %s: %v", ErrNotCheckpoint, name, metadata.ConfigDumpFile, err)
			}
			config = true
		case metadata.SpecDumpFile:
			if err := readJSON(tr, h, &a.Spec); err != nil {
				return Archive{}, fmt.Errorf("%w: %s: %s: %v", ErrNotCheckpoint, name, metadata.SpecDumpFile, err)
			}
			spec = true
		case metadata.CheckpointDirectory + "/inventory.img":
			images = true
		}
	}
	var missing []string
	if !images {
		missing = append(missing, metadata.CheckpointDirectory+"/ (CRIU's images)")
	}
	if !config {
		missing = append(missing, metadata.ConfigDumpFile)
	}
	if !spec {
		missing = append(missing, metadata.SpecDumpFile)
	}
	if len(missing) > 0 {
		return Archive{}, fmt.Errorf("%w: %s lacks %s", ErrNotCheckpoint, name, strings.Join(missing, ", "))
	}
	if a.Spec.Process == nil {
		return Archive{}, fmt.Errorf("%w: %s: %s has no process", ErrNotCheckpoint, name, metadata.SpecDumpFile)
	}
	if a.Config.RootfsImageName == "" && a.Config.RootfsImageRef == "" && a.Config.RootfsImage == "" {
		return Archive{}, fmt.Errorf("%w: %s: %s names no image", ErrNotCheckpoint, name, metadata.ConfigDumpFile)
	}
	return a, nil
}

// Image is the image the checkpointed container ran, which the restored one is made
// from: its name as the checkpointing node knew it, or its ID.
func (a Archive) Image() string {
	for _, s := range []string{a.Config.RootfsImageName, a.Config.RootfsImage, a.Config.RootfsImageRef} {
		if s != "" {
			return s
		}
	}
	return ""
}

// entryName is a tar entry's name, cleaned and relative ("./config.dump" is
// "config.dump").
func entryName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

func readJSON(r io.Reader, h *tar.Header, v any) error {
	if h.Typeflag != tar.TypeReg || h.Size > metadataLimit {
		return fmt.Errorf("not a regular file of at most %d bytes", metadataLimit)
	}
	return json.NewDecoder(io.LimitReader(r, metadataLimit)).Decode(v)
}

// RestoreDir is the restore directory of container id under root.
func RestoreDir(root, id string) string { return filepath.Join(root, id+restoreDirMark) }

// Open opens a tar stream of the checkpoint's files: the archive, or an image's layers
// one after the other. The caller closes it.
type Open func(ctx context.Context) (io.ReadCloser, error)

// ImportStep returns the step that imports the checkpoint that open reads into dir (a
// RestoreDir, whose parent exists or is made) and applies its root filesystem changes
// to rootfs, where the new container's root filesystem is mounted. A retry starts over.
func ImportStep(open Open, dir, rootfs string) journal.Action[struct{}] {
	return journal.Action[struct{}]{Kind: StepImport, Stage: StageImport, Args: map[string]string{ArgDir: dir},
		Run: func(ctx context.Context) (struct{}, error) {
			return struct{}{}, Import(ctx, open, dir, rootfs)
		}}
}

// Import extracts the checkpoint's files to dir (see ImportStep), then applies
// rootfs-diff.tar to rootfs and removes the paths deleted.files lists from it.
func Import(ctx context.Context, open Open, dir, rootfs string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("restore directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("restore directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("restore directory: %w", err)
	}
	rc, err := open(ctx)
	if err != nil {
		return err
	}
	err = extract(ctx, rc, dir)
	rc.Close()
	if err != nil {
		return fmt.Errorf("import checkpoint to %s: %w", dir, err)
	}
	if err := os.Mkdir(filepath.Join(dir, WorkDir), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return applyRootfs(dir, rootfs)
}

// extract writes the regular files and directories of tar stream r under dir, through
// an os.Root so that no entry's name or link leads out of it; other entries (CRIU
// writes none) are skipped.
func extract(ctx context.Context, r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := entryName(h.Name)
		if name == "" || name == "." {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o700); err != nil {
					return err
				}
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
}

// applyRootfs applies the imported rootfs-diff.tar to rootfs (containers/storage's
// Untar, which the export's diff was written with and which keeps every entry inside
// rootfs), then removes what deleted.files lists, through an os.Root.
func applyRootfs(dir, rootfs string) error {
	if f, err := os.Open(filepath.Join(dir, metadata.RootFsDiffTar)); err == nil {
		err = archive.Untar(f, rootfs, &archive.TarOptions{Compression: archive.Uncompressed})
		f.Close()
		if err != nil {
			return fmt.Errorf("apply %s: %w", metadata.RootFsDiffTar, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var deleted []string
	if _, err := metadata.ReadJSONFile(&deleted, dir, metadata.DeletedFilesFile); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read %s: %w", metadata.DeletedFilesFile, err)
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, p := range deleted {
		rel := entryName(p)
		if rel == "" || rel == "." {
			continue
		}
		if err := root.RemoveAll(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s (%s): %w", p, metadata.DeletedFilesFile, err)
		}
	}
	return nil
}

// Images is the directory of CRIU's images in a restore directory.
func Images(dir string) string { return filepath.Join(dir, metadata.CheckpointDirectory) }

// WriteSpec writes the restored container's spec to its restore directory.
func WriteSpec(dir string, spec *specs.Spec) error {
	_, err := metadata.WriteJSONFile(spec, dir, SpecFile)
	return err
}

// ReadSpec reads the spec WriteSpec wrote.
func ReadSpec(dir string) (*specs.Spec, error) {
	var spec specs.Spec
	if _, err := metadata.ReadJSONFile(&spec, dir, SpecFile); err != nil {
		return nil, fmt.Errorf("the restored container's spec: %w", err)
	}
	return &spec, nil
}

// undoImport is StepImport's undo: it removes the restore directory.
func undoImport(args map[string]string) error {
	dir := args[ArgDir]
	if !filepath.IsAbs(dir) || !strings.HasSuffix(dir, restoreDirMark) {
		return fmt.Errorf("undo %s: %q is not a restore directory", StepImport, dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("undo %s: %w", StepImport, err)
	}
	return nil
}
