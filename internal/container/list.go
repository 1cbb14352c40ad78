package container

import (
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/protocache"
	"github.com/rtshimd/rtshimd/internal/sandbox"
)

// List returns the containers that match filter, from memory. The messages are shared
// (built once per state of each container): callers must not change them.
func (m *Manager) List(filter *runtimeapi.ContainerFilter) []*runtimeapi.Container {
	return protocache.Messages(m.match(filter), (*Container).listItem)
}

// ListEncoded is List's items in their wire encoding, for ListContainers to send as they
// are (protocache.SetRepeated).
func (m *Manager) ListEncoded(filter *runtimeapi.ContainerFilter) [][]byte {
	return protocache.Encodings(m.match(filter), (*Container).listItem)
}

// match picks the containers filter selects; the index's lock is held only to copy it.
func (m *Manager) match(filter *runtimeapi.ContainerFilter) []*Container {
	all := m.index.Pick(filter.GetId(), filter.GetPodSandboxId())
	out := all[:0]
	for _, c := range all {
		if f := filter.GetState(); f != nil && f.State != criState(c.Status().State) {
			continue
		}
		if !sandbox.MatchLabels(filter.GetLabelSelector(), c.config.Labels) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// listKey is what can change of a container as List reports it: its state, and its image
// ID, recorded once its rootfs is made.
type listKey struct {
	state   runtimeapi.ContainerState
	imageID string
}

// listItem is the container as List reports it, and its encoding; rebuilt when its
// listKey changes.
func (c *Container) listItem() (*runtimeapi.Container, []byte) {
	key := listKey{criState(c.Status().State), c.ImageID}
	msg, enc := c.listed.Get(key, func() proto.Message {
		return &runtimeapi.Container{
			Id:           c.ID,
			PodSandboxId: c.SandboxID,
			Metadata:     c.config.Metadata,
			Image:        &runtimeapi.ImageSpec{Image: c.imageName(), RuntimeHandler: c.ImageHandler},
			ImageRef:     c.imageRef(),
			ImageId:      key.imageID,
			State:        key.state,
			CreatedAt:    c.CreatedAt,
			Labels:       c.config.Labels,
			Annotations:  c.config.Annotations,
		}
	})
	return msg.(*runtimeapi.Container), enc
}

// StatsAttributes is the container's ContainerStats attributes, encoded, built once.
func (c *Container) StatsAttributes() []byte {
	return c.statsAttrs.Encoded(struct{}{}, func() proto.Message {
		return &runtimeapi.ContainerAttributes{Id: c.ID, Metadata: c.config.Metadata, Labels: c.config.Labels, Annotations: c.config.Annotations}
	})
}
