package oci

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// CDI applies Container Device Interface devices (vendor.com/class=name) to runtime
// specs, as the CDI spec files in its directories describe them: device nodes,
// mounts, environment variables, hooks and groups. The directories are read again
// before every injection, so a spec file written by a device plugin is seen by the
// next container without a restart and without a watching goroutine. It is safe for
// concurrent use.
type CDI struct {
	cache *cdi.Cache
	dirs  []string
}

// NewCDI returns a CDI over the spec directories, later ones taking precedence; a
// missing directory holds no device. With no directory every device is unknown.
func NewCDI(dirs []string) *CDI {
	// NewCache's error is always nil (kept by the library for compatibility).
	cache, _ := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	return &CDI{cache: cache, dirs: slices.Clone(dirs)}
}

// CDIDevices returns the CDI devices a container asks for: its CDI_devices, then
// those its cdi.k8s.io/ annotations name (the older form, still written by some
// device plugins), in order of the annotation keys, each device once. A device
// name that is not fully qualified is refused (ErrInvalidSpec).
func CDIDevices(c *runtimeapi.ContainerConfig) ([]string, error) {
	var out []string
	for _, d := range c.GetCDIDevices() {
		name := d.GetName()
		if !parser.IsQualifiedName(name) {
			return nil, invalid("CDI device %q is not a fully qualified name (vendor.com/class=name)", name)
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	annotated := map[string]string{}
	for k, v := range c.GetAnnotations() {
		if strings.HasPrefix(k, cdi.AnnotationPrefix) {
			annotated[k] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(annotated)) {
		_, devs, err := cdi.ParseAnnotations(map[string]string{k: annotated[k]})
		if err != nil {
			return nil, invalid("annotation %s: %v", k, err)
		}
		for _, d := range devs {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out, nil
}

// Inject rereads the spec directories and applies the devices to spec. A device that
// no spec file defines is refused naming it (ErrInvalidSpec); so is a device whose
// edits cannot be applied (such as a device node missing on the host). Spec files
// that do not parse are skipped, their errors returned only when a device is missing,
// where they may be why.
func (c *CDI) Inject(spec *specs.Spec, devices []string) error {
	if len(devices) == 0 {
		return nil
	}
	refreshErr := c.cache.Refresh()
	unresolved, err := c.cache.InjectDevices(spec, devices...)
	switch {
	case len(unresolved) > 0:
		why := ""
		if refreshErr != nil {
			why = fmt.Sprintf(" (spec files that could not be read: %v)", refreshErr)
		}
		return invalid("unknown CDI device %s: no CDI spec in %s defines it%s",
			strings.Join(unresolved, ", "), quoteDirs(c.dirs), why)
	case err != nil:
		return invalid("CDI devices %s: %v", strings.Join(devices, ", "), err)
	}
	return nil
}

func quoteDirs(dirs []string) string {
	if len(dirs) == 0 {
		return "no directory (cdi_spec_dirs is empty)"
	}
	return strings.Join(dirs, ", ")
}
