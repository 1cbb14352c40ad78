package cri

import (
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// checkImageHandler checks spec's runtime_handler (images per RuntimeClass, KEP-4216:
// kubelet sends the pod's handler with RuntimeClassInImageCriApi) against the handler
// table. rtshimd keeps one image store for every handler, as containerd does without a
// per-runtime snapshotter, so a configured handler gets the same image as the default; an
// unknown one is refused rather than dropped. field is the ImageSpec's path in the request.
func (s *Server) checkImageHandler(field string, spec *runtimeapi.ImageSpec) error {
	if err := s.Handlers.Table().ImageHandler(spec.GetRuntimeHandler()); err != nil {
		return fmt.Errorf("%s.runtime_handler: %w", field, err)
	}
	return nil
}

// checkContainerImageHandlers checks the container's image and its image volumes.
func (s *Server) checkContainerImageHandlers(cfg *runtimeapi.ContainerConfig) error {
	if err := s.checkImageHandler("config.image", cfg.GetImage()); err != nil {
		return err
	}
	for i, m := range cfg.GetMounts() {
		if m.GetImage() == nil {
			continue
		}
		if err := s.checkImageHandler(fmt.Sprintf("config.mounts[%d].image", i), m.GetImage()); err != nil {
			return err
		}
	}
	return nil
}
