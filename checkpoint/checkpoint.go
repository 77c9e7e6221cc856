// Package checkpoint writes the checkpoint archive of a running container
// (CheckpointContainer, the kubelet's forensic checkpoint): CRIU's images of its
// processes, taken through the OCI runtime while the container keeps running, with what
// a restore or a person needs to make sense of them, in the layout that checkpointctl
// reads and that CRI-O and containerd write:
//
//	checkpoint/       CRIU's images (runc checkpoint --image-path)
//	dump.log          CRIU's log, stats-dump its statistics (--work-path)
//	config.dump       checkpointctl's ContainerConfig: ID, name, image, runtime, times
//	spec.dump         the container's OCI spec (its bundle's config.json), with
//	                  containerd's CRI annotations naming the container, pod and namespace
//	status.dump       the container's CRI status, as JSON
//	container.log     the container's log so far
//	rootfs-diff.tar   what its processes added or changed in the root filesystem
//	deleted.files     what they deleted from it (JSON list), when anything
//
// An export is one journaled step of the container's record ([StepExport]), committed
// before anything is written: its work directory, where the archive's files are
// gathered, and its partial archive, written beside the location and renamed onto it
// once whole. Its undo ([RegisterUndos]) kills what may still write into the work
// directory (a CRIU whose daemon died), thaws the container if CRIU left its cgroup
// frozen, and removes the work directory and the partial archive; it never touches the
// location. So a request that fails, times out, or a daemon killed at any point of it
// followed by a restart leaves no file but, once an export has finished, the archive.
package checkpoint

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crijournal/crijournal/failpoint"
	"github.com/crijournal/crijournal/internal/durable"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

// StepExport is the export of a checkpoint archive (Export), a step of the container's
// record. Its undo removes the step's work directory and partial archive and thaws the
// container CRIU may have left frozen; it is idempotent. Args: ArgHandler, ArgID,
// ArgWork and ArgPartial. The string is stored in the journal: never change it.
const StepExport journal.StepKind = "checkpoint-export"

// Stage is the container's stage while an export runs, as inspect shows it.
const Stage = "checkpoint export"

// Keys of StepExport's arguments.
const (
	ArgHandler = "handler"
	ArgID      = "id"
	ArgWork    = "work"
	ArgPartial = "partial"
)

// Files of the archive that CRI-O and containerd name as checkpointctl's lib does not.
const (
	// LogFile is the container's log.
	LogFile = "container.log"
	// BindMountsFile lists the bind mounts' sources and whether each is a file or a
	// directory (CRI-O's bind.mounts), so that a restore can make missing ones.
	BindMountsFile = "bind.mounts"
)

// Failure points of Export, for the crash tests: once its work directory holds the
// metadata, before CRIU runs; after CRIU's dump; and once the partial archive is whole,
// before it is renamed onto the location.
const (
	FailpointAfterSetup    = "container-checkpoint/" + string(StepExport) + "/after-setup"
	FailpointAfterDump     = "container-checkpoint/" + string(StepExport) + "/after-dump"
	FailpointBeforePublish = "container-checkpoint/" + string(StepExport) + "/before-publish"
)

// ErrInvalidLocation is returned by Plan when the archive's location is not an absolute
// path of a file in an existing directory.
var ErrInvalidLocation = errors.New("invalid checkpoint location")

// Job is one export: its container, where it gathers the files, and where the archive
// goes. Make it with Plan.
type Job struct {
	ID, Handler string
	// Work is the work directory; CRIU's images go to its checkpoint/.
	Work string
	// Partial is the archive while it is written, beside Location.
	Partial string
	// Location is where the archive goes once whole.
	Location string
}

// Plan checks location and names an export of container id (run by the runtime of
// handler) to it, its work directory under workRoot. It makes nothing.
func Plan(workRoot, location, id, handler string) (Job, error) {
	if location == "" {
		return Job{}, fmt.Errorf("%w: the archive's location is required", ErrInvalidLocation)
	}
	if !filepath.IsAbs(location) {
		return Job{}, fmt.Errorf("%w: %q is not an absolute path", ErrInvalidLocation, location)
	}
	location = filepath.Clean(location)
	if location == "/" {
		return Job{}, fmt.Errorf("%w: %q is a directory", ErrInvalidLocation, location)
	}
	dir := filepath.Dir(location)
	if fi, err := os.Stat(dir); err != nil {
		return Job{}, fmt.Errorf("%w: %q: its directory: %w", ErrInvalidLocation, location, err)
	} else if !fi.IsDir() {
		return Job{}, fmt.Errorf("%w: %q: %s is not a directory", ErrInvalidLocation, location, dir)
	}
	if fi, err := os.Stat(location); err == nil && fi.IsDir() {
		return Job{}, fmt.Errorf("%w: %q is a directory", ErrInvalidLocation, location)
	} else if err == nil && !fi.Mode().IsRegular() {
		return Job{}, fmt.Errorf("%w: %q exists and is not a regular file", ErrInvalidLocation, location)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Job{}, err
	}
	nonce := hex.EncodeToString(b[:])
	return Job{
		ID: id, Handler: handler, Location: location,
		Work:    filepath.Join(workRoot, id+"-"+nonce),
		Partial: filepath.Join(dir, "."+filepath.Base(location)+".crijournal-"+nonce),
	}, nil
}

// Step is the intent of the job's step, to commit before Export.
func (j Job) Step() journal.Intended {
	return journal.Intended{Kind: StepExport, Stage: Stage, Args: map[string]string{
		ArgHandler: j.Handler, ArgID: j.ID, ArgWork: j.Work, ArgPartial: j.Partial,
	}}
}

// Source is what Export archives besides CRIU's images.
type Source struct {
	// Config is config.dump.
	Config metadata.ContainerConfig
	// Spec is spec.dump: the container's OCI spec, with annotations for checkpointctl.
	Spec *specs.Spec
	// Status is status.dump: the container's CRI status, JSON.
	Status []byte
	// LogPath is the container's log, copied as container.log; "" or missing: none.
	LogPath string
	// RootfsDiff writes rootfs-diff.tar and returns the deleted paths (deleted.files).
	RootfsDiff func(ctx context.Context, w io.Writer) (deleted []string, err error)
}

// Export takes the checkpoint of job's container with rt (CRIU, the container keeping
// on running) and writes its archive to the job's location: the files are gathered in
// the work directory, archived to the partial file, which is synced and renamed onto the
// location. The caller has committed job.Step first, and undoes it after, whatever the
// outcome (the undo removes the work directory). ctx bounds it all.
func Export(ctx context.Context, rt *oci.Runtime, job Job, src Source) error {
	if err := os.MkdirAll(filepath.Dir(job.Work), 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(job.Work, 0o700); err != nil {
		return fmt.Errorf("checkpoint work directory: %w", err)
	}
	images := filepath.Join(job.Work, metadata.CheckpointDirectory)
	if err := os.Mkdir(images, 0o700); err != nil {
		return fmt.Errorf("checkpoint work directory: %w", err)
	}
	if err := writeMetadata(job.Work, src); err != nil {
		return fmt.Errorf("checkpoint of %s: %w", job.ID, err)
	}
	if err := failpoint.Inject(FailpointAfterSetup); err != nil {
		return err
	}
	if err := rt.Checkpoint(ctx, job.ID, images, job.Work); err != nil {
		return err
	}
	if err := failpoint.Inject(FailpointAfterDump); err != nil {
		return err
	}
	if err := copyLog(src.LogPath, filepath.Join(job.Work, LogFile)); err != nil {
		return fmt.Errorf("checkpoint of %s: container log: %w", job.ID, err)
	}
	if src.RootfsDiff != nil {
		if err := writeRootfsDiff(ctx, job.Work, src.RootfsDiff); err != nil {
			return fmt.Errorf("checkpoint of %s: %w", job.ID, err)
		}
	}
	if err := writeArchive(ctx, job.Work, job.Partial); err != nil {
		return fmt.Errorf("checkpoint of %s: archive %s: %w", job.ID, job.Partial, err)
	}
	if err := failpoint.Inject(FailpointBeforePublish); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("checkpoint of %s: %w", job.ID, err)
	}
	if err := publish(job.Partial, job.Location); err != nil {
		return fmt.Errorf("checkpoint of %s: %w", job.ID, err)
	}
	return nil
}

// publish renames the archive partial, whole and synced, onto location, and syncs their
// directory: a reader of location finds the whole archive or none, and once publish has
// returned, so does a reader after a power cut. On failure partial stays, for the step's
// undo.
func publish(partial, location string) error {
	if err := os.Rename(partial, location); err != nil {
		return err
	}
	return durable.SyncDir(filepath.Dir(location))
}

// writeMetadata writes config.dump, spec.dump, status.dump and bind.mounts.
func writeMetadata(dir string, src Source) error {
	if _, err := metadata.WriteJSONFile(src.Config, dir, metadata.ConfigDumpFile); err != nil {
		return err
	}
	if src.Spec != nil {
		if _, err := metadata.WriteJSONFile(src.Spec, dir, metadata.SpecDumpFile); err != nil {
			return err
		}
		if binds := bindMounts(src.Spec); len(binds) > 0 {
			if _, err := metadata.WriteJSONFile(binds, dir, BindMountsFile); err != nil {
				return err
			}
		}
	}
	if src.Status != nil {
		if err := os.WriteFile(filepath.Join(dir, metadata.StatusDumpFile), src.Status, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// bindMount is an entry of bind.mounts, as CRI-O writes it.
type bindMount struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
	FileType    string `json:"file_type"`
	Permissions uint32 `json:"permissions"`
}

// bindMounts lists the spec's bind mounts whose source exists.
func bindMounts(spec *specs.Spec) []bindMount {
	var out []bindMount
	for _, m := range spec.Mounts {
		if m.Type != "bind" || m.Destination == "/dev/shm" {
			continue
		}
		fi, err := os.Stat(m.Source)
		if err != nil {
			continue
		}
		kind := "file"
		if fi.IsDir() {
			kind = "directory"
		}
		out = append(out, bindMount{Source: m.Source, Destination: m.Destination, FileType: kind, Permissions: uint32(fi.Mode().Perm())})
	}
	return out
}

// copyLog copies the container's log, when it has one, to dst.
func copyLog(src, dst string) error {
	if src == "" {
		return nil
	}
	in, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeRootfsDiff writes rootfs-diff.tar, and deleted.files when anything was deleted.
func writeRootfsDiff(ctx context.Context, dir string, diff func(context.Context, io.Writer) ([]string, error)) error {
	f, err := os.OpenFile(filepath.Join(dir, metadata.RootFsDiffTar), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	deleted, err := diff(ctx, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if len(deleted) == 0 {
		return nil
	}
	_, err = metadata.WriteJSONFile(deleted, dir, metadata.DeletedFilesFile)
	return err
}

// writeArchive writes every file under dir, as an uncompressed tar, to path (mode 0600:
// it holds every page of the container's memory), and syncs it.
func writeArchive(ctx context.Context, dir, path string) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.IsDir() && !info.Mode().IsRegular() {
			return nil // CRIU writes regular files only
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		in, err := root.Open(rel)
		if err != nil {
			return err
		}
		defer in.Close()
		_, err = io.Copy(tw, in)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Sync()
}

// Annotations returns spec's annotations with those that name the container for
// checkpointctl: containerd's CRI annotations, which checkpointctl reads for any
// container manager other than CRI-O and Podman, and io.container.manager.
func Annotations(spec map[string]string, container, pod, namespace, podUID, sandboxID, image string) map[string]string {
	out := make(map[string]string, len(spec)+7)
	for k, v := range spec {
		out[k] = v
	}
	out["io.container.manager"] = "crijournal"
	out["io.kubernetes.cri.container-type"] = "container"
	out["io.kubernetes.cri.container-name"] = container
	out["io.kubernetes.cri.sandbox-name"] = pod
	out["io.kubernetes.cri.sandbox-namespace"] = namespace
	out["io.kubernetes.cri.sandbox-uid"] = podUID
	out["io.kubernetes.cri.sandbox-id"] = sandboxID
	out["io.kubernetes.cri.image-name"] = image
	return out
}

// RegisterUndos registers the undos of StepExport and StepImport. runtimes returns the
// runtime of a handler (the one recorded in the step).
func RegisterUndos(reg *journal.Registry, runtimes func(handler string) (*oci.Runtime, error)) {
	reg.Register(StepExport, func(ctx context.Context, _ journal.Record, step journal.Step) error {
		return undo(ctx, runtimes, step.Args)
	})
	reg.Register(StepImport, func(_ context.Context, _ journal.Record, step journal.Step) error {
		return undoImport(step.Args)
	})
}

// undo is StepExport's undo: see the package comment.
func undo(ctx context.Context, runtimes func(handler string) (*oci.Runtime, error), args map[string]string) error {
	work, partial, id := args[ArgWork], args[ArgPartial], args[ArgID]
	if work == "" || partial == "" || id == "" {
		return fmt.Errorf("undo %s: step lacks its work directory, partial archive or container ID", StepExport)
	}
	if !strings.Contains(filepath.Base(partial), ".crijournal-") {
		return fmt.Errorf("undo %s of %s: %q is not a partial archive's name", StepExport, id, partial)
	}
	if _, err := os.Lstat(work); err == nil {
		if err := killWriters(ctx, work); err != nil {
			return fmt.Errorf("undo %s of %s: %w", StepExport, id, err)
		}
	}
	rt, err := runtimes(args[ArgHandler])
	if err != nil {
		return fmt.Errorf("undo %s of %s: runtime handler %q: %w", StepExport, id, args[ArgHandler], err)
	}
	if err := rt.ResumeIfPaused(ctx, id); err != nil {
		return fmt.Errorf("undo %s of %s: thaw the container: %w", StepExport, id, err)
	}
	if err := os.RemoveAll(work); err != nil {
		return fmt.Errorf("undo %s of %s: %w", StepExport, id, err)
	}
	if err := os.Remove(partial); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("undo %s of %s: %w", StepExport, id, err)
	}
	return nil
}
