package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/storage"
)

// Stages of a container creation, as inspect and waiting requests show them.
const (
	stageContainerReserve = "container name reservation"
	stageContainerStorage = "container storage creation"
	stageContainerRuntime = "container runtime creation"
)

// flowContainerCreate names the container creation flow in failure points.
const flowContainerCreate = "container-create"

// runtimeCreateTimeout bounds the runtime's part of a creation (conmon + runc create). It
// runs detached from the request, like the network, so a slow runtime still finishes and
// its container is cached for the retry.
const runtimeCreateTimeout = 4 * time.Minute

// CreateContainer creates a container in a created sandbox: a storage container (root
// filesystem) from the image, then the OCI container under conmon. Each step is journaled
// before it acts; a creation that outlives its request is cached for the retry, exactly as
// RunPodSandbox does.
func (s *Server) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	if s.images == nil || s.runtimes == nil {
		return nil, status.Error(codes.Unavailable, "containers are not available on this daemon (no storage or runtime)")
	}
	sb, err := s.findSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	// Through the pod's gate for the whole creation, then look again: a removal of
	// the pod that finished between the two looks must not get a container after it.
	leave, ok := s.pods.enter(sb.rec.ID)
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %s is being removed", sb.rec.ID)
	}
	defer leave()
	if sb, err = s.findSandbox(sb.rec.ID); err != nil {
		return nil, err
	}
	if sb.state() != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "pod sandbox %s is not ready (stopped)", sb.rec.ID)
	}
	cfg := req.GetConfig()
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
		return nil, status.Errorf(codes.NotFound, "image %q is not present on this node: pull it first", cfg.GetImage().GetImage())
	}
	if err != nil {
		return nil, imageError(err)
	}
	handler := sb.obj.RuntimeHandler
	if handler == "" {
		handler = s.cfg.DefaultRuntime
	}
	rt, err := s.runtimes.Runtime(handler)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "runtime handler %q: %v", handler, err)
	}

	deadline, _ := ctx.Deadline()
	res, err := s.reserve(ctx, journal.BeginRequest{
		Kind: journal.KindContainer, Name: name, Parent: sb.rec.ID, Deadline: deadline, Stage: stageContainerReserve,
		Fingerprint: fingerprint(cfg, sb.rec.ID),
	}, legacyFingerprint(cfg, sb.rec.ID))
	if err != nil {
		return nil, err
	}
	if res.existingID != "" {
		return &runtimeapi.CreateContainerResponse{ContainerId: res.existingID}, nil
	}
	rec := res.record
	id := rec.ID
	obj := containerObject{
		Config: mustMarshal(cfg), SandboxID: sb.rec.ID, Image: cfg.GetImage().GetImage(), ImageID: img.ID,
		Handler: handler, LogPath: logFile, StopSig: img.Config.StopSignal, CreatedAt: time.Now(),
	}
	obj.ImageRef = img.ID
	if len(img.RepoDigests) > 0 {
		obj.ImageRef = img.RepoDigests[0]
	}

	// Step 1: the root filesystem, a storage container from the image, mounted.
	err = s.step(ctx, flowContainerCreate, rec, stageContainerStorage, storage.StepContainerStorage, storage.ContainerArgs(id), func() error {
		sctx, cancel := detached(ctx, runtimeCreateTimeout)
		defer cancel()
		if _, err := s.images.CreateContainer(sctx, id, name, img.ID, map[string]string{"io.crijournal.sandbox": sb.rec.ID}); err != nil {
			return err
		}
		rootfs, err := s.images.Mount(sctx, id)
		if err != nil {
			return err
		}
		obj.Rootfs = rootfs
		obj.Bundle, _, err = s.images.ContainerDirs(id)
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, rec, stageContainerStorage, err)
	}

	spec, err := oci.Spec(oci.SpecInput{
		ID: id, Container: cfg, Sandbox: sb.config, Rootfs: obj.Rootfs, Namespaces: sb.obj.Namespaces,
		Hostname: sandboxHostname(sb.config),
		Image: oci.ImageConfig{Entrypoint: img.Config.Entrypoint, Cmd: img.Config.Cmd, Env: img.Config.Env,
			WorkingDir: img.Config.WorkingDir, User: img.Config.User, StopSignal: img.Config.StopSignal},
	})
	obj.User = specUser(spec)
	if err != nil {
		err = s.fail(ctx, rec, "container spec", err)
		if errors.Is(err, oci.ErrInvalidSpec) {
			// Converted after fail wraps it: a status error wrapped in another error
			// would show "rpc error: code = ... desc =" twice in the message.
			err = status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, err
	}

	// Step 2: the OCI container, created by the runtime under conmon.
	err = s.step(ctx, flowContainerCreate, rec, stageContainerRuntime, oci.StepRuntimeContainer, oci.ContainerArgs(handler, id), func() error {
		rctx, cancel := detached(ctx, runtimeCreateTimeout)
		defer cancel()
		if err := ensureLogDir(logFile); err != nil {
			return err
		}
		_, err := rt.Create(rctx, id, obj.Bundle, spec, logFile, oci.StdinModeOf(cfg))
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, rec, stageContainerRuntime, err)
	}

	if _, err := s.finish(ctx, flowContainerCreate, id, obj); err != nil {
		return nil, err
	}
	s.log.Info("container created", "id", id, "name", name, "sandbox", sb.rec.ID, "image", obj.Image)
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}
