package cri

import (
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// checkImageHandler checks spec's runtime_handler (images per RuntimeClass, KEP-4216:
// kubelet sends the pod's handler with RuntimeClassInImageCriApi) against the handler
// table: any configured row, or "" for the default; an unknown one is refused rather than
// dropped. Its images are in the row's own store where the row asks for one (image_store
// = "separate"), else in the store every row shares (image.Stores). field is the
// ImageSpec's path in the request.
func (s *Server) checkImageHandler(field string, spec *runtimeapi.ImageSpec) error {
	if _, _, err := s.Handlers.Table().ImageStore(spec.GetRuntimeHandler()); err != nil {
		return fmt.Errorf("%s.runtime_handler: %w", field, err)
	}
	return nil
}

// checkContainerImageHandlers checks the container's image and its image volumes: a
// container's images come from its pod's row's store (an ImageSpec naming no handler
// means the pod's, as kubelet without RuntimeClassInImageCriApi sends it), so one naming
// a handler whose images live in another store is refused rather than served from the
// pod's.
func (s *Server) checkContainerImageHandlers(podID string, cfg *runtimeapi.ContainerConfig) error {
	type named struct {
		field string
		spec  *runtimeapi.ImageSpec
	}
	specs := []named{{"config.image", cfg.GetImage()}} // in the request's order: the first bad one is named
	for i, m := range cfg.GetMounts() {
		if m.GetImage() != nil {
			specs = append(specs, named{fmt.Sprintf("config.mounts[%d].image", i), m.GetImage()})
		}
	}
	sb, _ := s.Sandboxes.Get(podID) // an unknown pod is the create's own error
	for _, n := range specs {
		field, spec := n.field, n.spec
		if err := s.checkImageHandler(field, spec); err != nil {
			return err
		}
		if sb == nil || spec.GetRuntimeHandler() == "" { // none: the pod's row
			continue
		}
		same, err := s.Images.SameStore(spec.GetRuntimeHandler(), sb.Handler)
		if err != nil {
			return fmt.Errorf("%s.runtime_handler: %w", field, err)
		}
		if !same {
			return fmt.Errorf("%s.runtime_handler %q keeps its images in another store than the pod's runtime handler %q (image_store): name the pod's handler or leave it empty: %w",
				field, spec.GetRuntimeHandler(), sb.Handler, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
