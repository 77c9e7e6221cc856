package server

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci"
)

// injectCDI applies the CDI devices the container asks for (CDI_devices and the
// cdi.k8s.io/ annotations) to its spec, from the spec files of cdi_spec_dirs. An
// unknown or malformed device is an invalid request.
func (s *Server) injectCDI(spec *specs.Spec, cfg *runtimeapi.ContainerConfig) error {
	devices, err := oci.CDIDevices(cfg)
	if err != nil || len(devices) == 0 {
		return err
	}
	return s.cdi.Inject(spec, devices)
}
