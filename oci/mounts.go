package oci

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	securejoin "github.com/cyphar/filepath-securejoin"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The sources of the request's mounts: host paths (created when missing), image volumes
// and recursive read-only mounts.

// ImageVolume is one image volume of a container (a CRI Mount with image set): the image
// mounted read-only at Destination, or only its SubPath.
type ImageVolume struct {
	Destination string // the container path, clean and absolute
	Image       string // the image as the request names it (Mount.image.image)
	SubPath     string // relative to the image's root, clean, no ".."; "" for the root
}

// ImageVolumes checks the image volumes of container config c and returns them, in the
// order of its mounts (a mount whose container path a later mount takes is left out, as
// Spec leaves it out). An image volume must be read-only, must not name a host path too,
// and its image_sub_path must stay inside the image: relative, without "..". Refusals
// wrap ErrInvalidSpec.
func ImageVolumes(c *runtimeapi.ContainerConfig) ([]ImageVolume, error) {
	last := map[string]int{} // container path -> index of the last mount at it
	for i, m := range c.GetMounts() {
		last[path.Clean(m.GetContainerPath())] = i
	}
	var out []ImageVolume
	for i, m := range c.GetMounts() {
		if m.GetImage() == nil {
			continue
		}
		dst := m.GetContainerPath()
		if !path.IsAbs(dst) || hasDotDot(dst) {
			return nil, invalid("image volume container path %q must be absolute without \"..\"", dst)
		}
		dst = path.Clean(dst)
		if last[dst] != i {
			continue
		}
		switch {
		case m.GetImage().GetImage() == "":
			return nil, invalid("image volume %s: no image", dst)
		case m.GetHostPath() != "":
			return nil, invalid("image volume %s: a host path (%q) and an image are mutually exclusive", dst, m.GetHostPath())
		case !m.GetReadonly():
			return nil, invalid("image volume %s: image volumes are read-only; the mount must set readonly", dst)
		}
		sub := m.GetImageSubPath()
		if sub != "" {
			if path.IsAbs(sub) || hasDotDot(sub) {
				return nil, invalid("image volume %s: image sub path %q must be relative without \"..\"", dst, sub)
			}
			if sub = path.Clean(sub); sub == "." {
				sub = ""
			}
		}
		out = append(out, ImageVolume{Destination: dst, Image: m.GetImage().GetImage(), SubPath: sub})
	}
	return out, nil
}

// imageVolumeSource returns the host path an image volume at dst binds: the mounted image
// (roots holds each image volume's mounted root by container path), or the sub path of
// it, resolved inside the image (symbolic links too), which must exist.
func imageVolumeSource(m *runtimeapi.Mount, dst string, roots map[string]string) (string, error) {
	vols, err := ImageVolumes(&runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{m}})
	if err != nil {
		return "", err
	}
	root := roots[dst]
	if !filepath.IsAbs(root) {
		return "", invalid("image volume %s: the image %q is not mounted", dst, m.GetImage().GetImage())
	}
	sub := vols[0].SubPath
	if sub == "" {
		return root, nil
	}
	src, err := securejoin.SecureJoin(root, sub)
	if err != nil {
		return "", invalid("image volume %s: image sub path %q: %v", dst, sub, err)
	}
	if _, err := os.Stat(src); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", invalid("image volume %s: image sub path %q does not exist in image %q", dst, sub, m.GetImage().GetImage())
		}
		return "", fmt.Errorf("image volume %s: image sub path %q: %w", dst, sub, err)
	}
	return src, nil
}

// bindSource returns the host path a bind mount at dst binds: the request's host path,
// with symbolic links followed (the container gets what it points to).
func bindSource(m *runtimeapi.Mount, dst string) (string, error) {
	src := m.GetHostPath()
	if !filepath.IsAbs(src) {
		return "", invalid("mount %s: host path %q is not absolute", dst, src)
	}
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", invalid("mount %s: host path %q does not exist", dst, src)
		}
		return "", fmt.Errorf("mount %s: host path %q: %w", dst, src, err)
	}
	return real, nil
}

// recursiveReadOnly checks a mount that asks for recursive_read_only, whose propagation
// option is prop: as the CRI says, it must be read-only and private, and the runtime must
// know the "rro" option (supported: the handler's runtime lists it in its features).
func recursiveReadOnly(m *runtimeapi.Mount, dst, prop string, supported bool) error {
	switch {
	case !m.GetReadonly():
		return invalid("mount %s: a recursive read-only mount must set readonly", dst)
	case prop != "rprivate":
		return invalid("mount %s: a recursive read-only mount must have propagation PRIVATE, not %v", dst, m.GetPropagation())
	case !supported:
		return invalid("mount %s: recursive read-only mounts are not supported by this runtime handler (its runtime's features do not list the \"rro\" mount option)", dst)
	}
	return nil
}

// HostPathMode is the mode of a missing host path that CreateHostPaths creates.
const HostPathMode = 0o755

// CreateHostPaths creates, as directories (HostPathMode, with their missing parents), the
// host paths of container config c's bind mounts that do not exist, as containerd and
// CRI-O do: a kubelet hostPath volume of type "" relies on it. A host path must be
// absolute and clean (filepath.Clean leaves it as it is: no "..", "." or empty
// component, no trailing slash) to be created; a dangling symbolic link is not followed. It returns the
// directories it created. Refusals wrap ErrInvalidSpec.
//
// The directories are not a journaled step and nothing removes them: a host path belongs
// to the node, not to the container (the kubelet expects a hostPath's directory, and
// whatever the container wrote in it, to outlive the container, and another container
// may bind it meanwhile); containerd and CRI-O leave them too.
func CreateHostPaths(c *runtimeapi.ContainerConfig) ([]string, error) {
	var created []string
	for _, m := range c.GetMounts() {
		src := m.GetHostPath()
		if m.GetImage() != nil || src == "" {
			continue
		}
		if _, err := os.Lstat(src); !errors.Is(err, os.ErrNotExist) {
			continue // there (or unreadable: the spec says why)
		}
		if !filepath.IsAbs(src) || filepath.Clean(src) != src {
			return created, invalid("mount %s: missing host path %q is not absolute and clean, so it is not created", m.GetContainerPath(), src)
		}
		if err := os.MkdirAll(src, HostPathMode); err != nil {
			return created, invalid("mount %s: creating missing host path %q: %v", m.GetContainerPath(), src, err)
		}
		created = append(created, src)
	}
	return created, nil
}
