package server

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/checkpoint"
	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/failpoint"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/nri"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/storage"
)

// Stages of a container creation other than its steps' (storage.StageContainer and
// oci.StageCreate), as inspect, logs and waiting requests show them.
const (
	stageContainerReserve = "container name reservation"
	stageContainerSpec    = "container spec"
)

// flowContainerCreate names the container creation flow in failure points.
const flowContainerCreate = "container-create"

// Limits of a container creation's steps. Both run detached from the request, like the
// network, so a slow one still finishes and its container is cached for the retry.
const (
	// storageCreateTimeout bounds creating and mounting the container's root filesystem.
	storageCreateTimeout = 4 * time.Minute
	// runtimeCreateTimeout bounds each of the runtime's steps (conmon's start; runc
	// create under it).
	runtimeCreateTimeout = 4 * time.Minute
)

// CreateContainer creates a container in a created sandbox: its conmon, started and
// held, a storage container (root filesystem) from the image, NRI's CreateContainer
// (whose plugins may adjust the spec), then the OCI container, which the runtime
// creates under that conmon. Each step is journaled before it acts; a creation that
// outlives its request is cached for the retry, exactly as RunPodSandbox does.
func (s *Server) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	started := time.Now()
	if s.images == nil || s.runtimes == nil {
		return nil, newError(errUnavailable, "containers are not available on this daemon (no storage or runtime)")
	}
	sb, err := s.findSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	// Through the pod's gate for the whole creation, then look again: a stop or removal
	// of the sandbox that finished between the two looks must not get a container after it.
	leave, ok := s.pods.enter(sb.rec.ID)
	if !ok {
		return nil, newError(errWrongState, "sandbox %s is being stopped or removed", sb.rec.ID)
	}
	defer leave()
	if sb, err = s.findSandbox(sb.rec.ID); err != nil {
		return nil, err
	}
	if sb.state() != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, newError(errWrongState, "sandbox %s is not ready (stopped)", sb.rec.ID)
	}
	cfg := req.GetConfig()
	// A checkpoint's archive or image as the image: a container to restore, made from
	// the checkpointed one's image and process (container_restore.go).
	restore, err := s.restoreOf(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if restore != nil {
		cfg = restore.config
	}
	name, err := containerName(cfg, sb.config)
	if err != nil {
		return nil, err
	}
	logFile, err := logPath(sb.config, cfg)
	if err != nil {
		return nil, err
	}
	img, err := s.images.ImageStatus(ctx, cfg.GetImage().GetImage())
	if errors.Is(err, storage.ErrImageNotFound) {
		return nil, newError(errNotFound, "image %q is not present on this node: pull it first", cfg.GetImage().GetImage())
	}
	if err != nil {
		return nil, err
	}
	volumes, err := s.findImageVolumes(ctx, cfg)
	if err != nil {
		return nil, err
	}
	handler := s.handlers().Resolve(sb.obj.RuntimeHandler)
	rt, err := s.runtimes.Runtime(handler)
	if err != nil {
		return nil, invalidf("runtime handler %q: %v", handler, err)
	}
	targetPid, err := s.targetPidNamespace(ctx, sb, cfg)
	if err != nil {
		return nil, err
	}

	deadline, _ := ctx.Deadline()
	c, existing, err := s.creations.Begin(ctx, flowContainerCreate, journal.BeginRequest{
		Kind: journal.KindContainer, Name: name, Identity: containerIdentity(sb.rec.ID, cfg), Parent: sb.rec.ID,
		Deadline: deadline, Stage: stageContainerReserve, Fingerprint: fingerprint(cfg, sb.rec.ID),
	}, creation.Same{Older: olderFingerprints(cfg, sb.rec.ID), AsRetried: func(made journal.Record) (any, error) {
		// The same container: it is recorded with this call's attempt, restart count
		// and log path, and its log is moved there once claimed (answerContainer).
		ctr, err := decodeContainer(made)
		if err != nil {
			return nil, err
		}
		ctr.obj.Config = mustMarshal(containerAsRetried(ctr.config, cfg))
		ctr.obj.LogPath = logFile
		return ctr.obj, nil
	}})
	if c == nil {
		return s.answerContainer(ctx, existing, err)
	}
	id := c.ID()
	obj := containerObject{
		Config: mustMarshal(cfg), SandboxID: sb.rec.ID, Image: cfg.GetImage().GetImage(), ImageID: img.ID,
		Handler: handler, LogPath: logFile, StopSig: img.Config.StopSignal, CreatedAt: time.Now(),
	}
	obj.ImageRef = img.ID
	if len(img.RepoDigests) > 0 {
		obj.ImageRef = img.RepoDigests[0]
	}

	// The container's conmon, started first and held on its start pipe until the runtime
	// step (oci.Runtime.Prepare), so that its exec and start overlap the next step; its
	// state directory is the container's bundle. Then the root filesystem: a storage
	// container from the image, mounted; in a pod with its own user namespace, owned by
	// the IDs its root and users map to. Their intents are committed together (see
	// plan): the undo of each finds nothing when the step never acted.
	var conmon *oci.Pending
	defer func() {
		if conmon != nil {
			conmon.Close() // kills a conmon the runtime step did not start
		}
	}()
	fsReq := storage.ContainerRequest{ID: id, Name: name, ImageID: img.ID, Labels: map[string]string{"io.crijournal.sandbox": sb.rec.ID}}
	if u := sb.config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); u.GetMode() == runtimeapi.NamespaceMode_POD {
		fsReq.UIDMap, fsReq.GIDMap = idMaps(u.GetUids()), idMaps(u.GetGids())
	}
	first := c.Plan()
	if restore == nil {
		creation.AddStep(first, creation.Limit{Max: runtimeCreateTimeout}, oci.ConmonStep(rt, id, logFile, cfg.GetTty(), oci.StdinModeOf(cfg)),
			func(p *oci.Pending) { conmon, obj.Bundle = p, p.Bundle() })
	} else {
		obj.Bundle = rt.BundleOf(id) // its conmon starts at StartContainer, which restores it
	}
	creation.AddStep(first, creation.Limit{Max: storageCreateTimeout}, storage.ContainerStep(s.images, fsReq),
		func(rootfs string) { obj.Rootfs = rootfs })
	if err := first.Run(); err != nil {
		return nil, err
	}
	if restore != nil {
		if err := s.importCheckpoint(c, restore, id, obj.Rootfs); err != nil {
			return nil, err
		}
	}

	// The image volumes: each image mounted read-only, a step each.
	volumeRoots, err := s.mountImageVolumes(c, id, volumes)
	if err != nil {
		return nil, err
	}
	obj.ImageVolumes = imageVolumeIDs(volumes)
	// Missing host paths of bind mounts become directories; not a step (see
	// oci.CreateHostPaths).
	if err := s.createHostPaths(cfg, name); err != nil {
		return nil, c.Fail(stageContainerSpec, err)
	}

	spec, err := oci.Spec(ctx, oci.SpecInput{
		ID: id, Container: cfg, Sandbox: sb.config, Rootfs: obj.Rootfs, Namespaces: sb.obj.Namespaces,
		TargetPidNamespace: targetPid,
		Hostname:           sandboxHostname(sb.config),
		ResolvConf:         sb.obj.ResolvConf, HostnameFile: sb.obj.HostnameFile, ShmPath: sb.obj.Shm, Hosts: sandboxHosts(sb),
		Image: oci.ImageConfig{Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd, Env: img.Config.Env,
			WorkingDir: img.Config.WorkingDir, User: img.Config.User, StopSignal: img.Config.StopSignal},
		NoSeccomp: s.cfg.SeccompUnavailable, SystemdCgroup: s.cfg.SystemdCgroup(),
		RecursiveReadOnly: s.supportsRecursiveReadOnly(ctx, handler), ImageVolumes: volumeRoots,
	})
	if err == nil {
		err = s.injectCDI(spec, cfg) // may add groups: before the user is recorded
	}
	if err == nil && restore != nil {
		restoreSpec(spec, restore.archive)
	}
	if err != nil {
		return nil, c.Fail(stageContainerSpec, err)
	}

	// The NRI plugins, asked about the spec; the spec they adjusted is the one created.
	// A plugin's synchronization waits until the container has settled (package nri).
	unblock := s.nri.Block()
	defer unblock()
	plugins, err := s.nriContainerStep(c, sb, cfg, spec)
	if err != nil {
		return nil, err
	}
	obj.User = specUser(spec)

	// The OCI container, created by the runtime under conmon; a restored one's spec is
	// kept for StartContainer's restore, in the restore directory the import made.
	if restore == nil {
		if _, err := creation.Step(c, creation.Limit{Max: runtimeCreateTimeout}, oci.CreateStep(conmon, spec)); err != nil {
			return nil, err
		}
	} else if err := checkpoint.WriteSpec(s.restoreDirOf(id), spec); err != nil {
		return nil, c.Fail(checkpoint.StageImport, err)
	}

	if _, err := c.Finish(obj); err != nil {
		return nil, err
	}
	unblock()
	s.log.Info("container created", "id", id, "name", name, "sandbox", sb.rec.ID, "image", obj.Image, "took", time.Since(started))
	s.nriCreated(ctx, id, plugins)
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

// answerContainer answers a CreateContainer settled by its reservation: the container
// that already holds the name, or the reservation's error. A container claimed from the
// cache has its log moved to the path its record now names (see placeLog).
func (s *Server) answerContainer(ctx context.Context, res creation.Reservation, err error) (*runtimeapi.CreateContainerResponse, error) {
	if err != nil {
		return nil, err
	}
	if res.Outcome == creation.Claimed {
		// Failure point "container-create/claimed": the claim (with the retry's log
		// path) is committed, the log not yet moved.
		if err := failpoint.Inject(flowContainerCreate + "/claimed"); err != nil {
			return nil, err
		}
		if c, err := s.findContainer(res.ExistingID); err != nil {
			s.log.Warn("claimed container not readable: its log stays where it is", "id", res.ExistingID, "err", err)
		} else {
			s.placeLog(c)
		}
		// Its creation ended cached, without PostCreateContainer: sent now, once.
		s.nriCreated(ctx, res.ExistingID, nri.Created{})
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: res.ExistingID}, nil
}

// placeLog moves a container's log to the path its record names, when a claim gave it
// another one (the retry's). The record is the intent: it was committed first, so a
// crash before the move is finished by reconciliation at the next start. A move that
// fails is logged and left to that, and to the next log reopen, which also moves it:
// the container itself is sound, and its log is still written where it was.
func (s *Server) placeLog(c container) {
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err == nil {
		err = rt.MoveLog(c.rec.ID, c.obj.LogPath)
	}
	if err != nil && !errors.Is(err, oci.ErrNotFound) { // not found: the runtime lost it, and nothing writes the log
		s.log.Warn("container log not moved to the path its record names", "id", c.rec.ID, "name", c.rec.Name, "log", c.obj.LogPath, "err", err)
	}
}

// specUser returns the user of a spec, for the container's record.
func specUser(spec *specs.Spec) *specs.User {
	if spec == nil || spec.Process == nil {
		return nil
	}
	u := spec.Process.User
	return &u
}

// logPath is where conmon writes the container's CRI log: the sandbox's log directory
// joined with the container's log path, both as the kubelet gives them; "" when either is
// missing (no log is kept, as in CRI-O).
func logPath(sandbox *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) (string, error) {
	dir, rel := sandbox.GetLogDirectory(), cfg.GetLogPath()
	if dir == "" || rel == "" {
		return "", nil
	}
	if !filepath.IsAbs(dir) {
		return "", invalidf("sandbox log_directory %q must be absolute", dir)
	}
	p := filepath.Join(dir, rel)
	if filepath.IsAbs(rel) || !strings.HasPrefix(p, filepath.Clean(dir)+"/") {
		return "", invalidf("log_path %q must stay inside the sandbox's log directory", rel)
	}
	return p, nil
}
