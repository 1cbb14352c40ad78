package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	dockerref "github.com/containers/image/v5/docker/reference"
	"github.com/containers/image/v5/manifest"
	"github.com/containers/storage"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// A checkpoint image is told by the manifest that was pulled for the reference a pod
// names, as containerd tells it by the named image's own manifest: not by the image's ID.
// An ID is its config's digest, and the store's "manifest" item of an ID is whatever the
// last pull of that ID brought, from whichever registry: anyone who pulls a public image's
// config and layers under an annotated manifest of their own registry would otherwise
// make every pod's copy of that image a checkpoint image (review 2026-12-06, R5).

// checkpointAnnotations are the manifest annotations that make an image a checkpoint
// image: one layer holding a checkpoint archive's files, named by the container it was
// taken of (CRI-O's, which buildah writes in its recipe, and checkpointctl's).
var checkpointAnnotations = []string{"io.kubernetes.cri-o.annotations.checkpoint.name", "org.criu.checkpoint.container.name"}

// checkpointRefsKey is our own big-data item of an image, written by its pulls
// (recordPull): JSON {"<normalized reference>": "<checkpoint name>"}, the references it
// was pulled by from a manifest annotated as a checkpoint. It lives and goes with the
// image, so it holds across restarts and is never read for another image.
const checkpointRefsKey = "rtshimd-checkpoint-refs"

// checkpointKey is what CheckpointName answers for: an image ID (bare) and a normalized
// reference.
type checkpointKey struct{ id, ref string }

// checkpointCache caches CheckpointName until the image's deletion. mu orders a pull's
// record (read, change, write, cache) against a miss's read and fill, so that a fill never
// caches what a pull has just replaced; neither waits for a layer's extraction (only the
// image store's lock is taken under it).
type checkpointCache struct {
	mu    sync.Mutex
	names sync.Map // checkpointKey → name, "" for none
}

// forget drops image id's answers, once it is deleted.
func (c *checkpointCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names.Range(func(k, _ any) bool {
		if k.(checkpointKey).id == id {
			c.names.Delete(k)
		}
		return true
	})
}

// CheckpointName is the name of the container that image imageID in handler's store is a
// checkpoint of, when ref (the reference the pod named) was pulled as that checkpoint
// image; "" for any other image or reference, and for an ID alone.
func (s *Stores) CheckpointName(handler, imageID, ref string) (string, error) {
	svc, row, err := s.storeFor(handler)
	if err != nil {
		return "", err
	}
	name, err := svc.CheckpointName(imageID, ref)
	return name, notPulled(err, row)
}

// CheckpointName: see Stores.CheckpointName. Asked on every CreateContainer: the image's
// record is read once per reference, then answered from the cache, which pulls update.
func (s *Service) CheckpointName(imageID, ref string) (string, error) {
	id := trimSHA(imageID)
	if ref == "" || isHexID(trimSHA(ref)) {
		return "", nil // an ID names no manifest
	}
	named, err := normalize(ref)
	if err != nil {
		return "", nil // no pull recorded a reference that does not parse
	}
	key := checkpointKey{id: id, ref: named.String()}
	c := &s.checkpointNames
	if v, ok := c.names.Load(key); ok {
		return v.(string), nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.names.Load(key); ok {
		return v.(string), nil
	}
	refs, err := s.checkpointRefs(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return "", fmt.Errorf("image %q: %w", imageID, err)
	}
	if err != nil {
		// Taken as none, as an image without a readable manifest was; not cached, so the
		// next create reads it again.
		logrus.WithError(err).WithField("image", id).Warn("cannot read by which references the image was pulled as a checkpoint image; taken as none")
		return "", nil
	}
	c.names.Store(key, refs[key.ref])
	return refs[key.ref], nil
}

// checkpointRefs is image id's record (checkpointRefsKey), empty when it has none or it
// does not parse; ErrNotFound when the image is not there. The caller holds
// checkpointNames.mu.
func (s *Service) checkpointRefs(id string) (map[string]string, error) {
	refs := map[string]string{}
	b, err := s.store.ImageBigData(id, checkpointRefsKey)
	switch {
	case errors.Is(err, storage.ErrImageUnknown):
		return nil, fmt.Errorf("image %s: %w", id, errdefs.ErrNotFound)
	case errors.Is(err, os.ErrNotExist):
		return refs, nil // never pulled from an annotated manifest
	case err != nil:
		return nil, err
	}
	if err := json.Unmarshal(b, &refs); err != nil {
		// A record we cannot read makes no checkpoint image; the next pull rewrites it.
		logrus.WithError(err).WithField("image", id).Warn("image's checkpoint record does not parse; taken as empty")
		return map[string]string{}, nil
	}
	return refs, nil
}

// manifestCheckpointName is the checkpoint name a pulled manifest is annotated with, ""
// for none (or a manifest that does not parse, as CRI-O takes it).
func manifestCheckpointName(b []byte) string {
	var m struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	for _, k := range checkpointAnnotations {
		if v := m.Annotations[k]; v != "" {
			return v
		}
	}
	return ""
}

// recordPull records what the manifest pulled for named (manifestBytes, image id) makes
// the image under named, and under named's repository at that manifest's digest (the
// digest names these very bytes): a checkpoint image of the name it is annotated with, or
// none, which takes back what an earlier pull of that reference recorded. Written only
// when it changes. The caller is the pull, before it answers.
func (s *Service) recordPull(id string, named dockerref.Named, manifestBytes []byte) error {
	name := manifestCheckpointName(manifestBytes)
	refs := []string{named.String()}
	if d, err := manifest.Digest(manifestBytes); err == nil {
		if canon, err := dockerref.WithDigest(dockerref.TrimNamed(named), d); err == nil && canon.String() != refs[0] {
			refs = append(refs, canon.String())
		}
	}
	c := &s.checkpointNames
	c.mu.Lock()
	defer c.mu.Unlock()
	recorded, err := s.checkpointRefs(id)
	if err != nil {
		return fmt.Errorf("record whether image %s is a checkpoint image: %w", id, err)
	}
	changed := false
	for _, r := range refs {
		if old, ok := recorded[r]; (name == "" && ok) || (name != "" && old != name) {
			changed = true
		}
		if name == "" {
			delete(recorded, r)
		} else {
			recorded[r] = name
		}
	}
	if changed {
		b, err := json.Marshal(recorded)
		if err == nil {
			err = s.store.SetImageBigData(id, checkpointRefsKey, b, nil)
		}
		if err != nil {
			return fmt.Errorf("record whether image %s is a checkpoint image: %w", id, err)
		}
	}
	for _, r := range refs {
		c.names.Store(checkpointKey{id: id, ref: r}, name)
	}
	if name != "" {
		logrus.WithFields(logrus.Fields{"image": id, "references": strings.Join(refs, " "), "checkpoint": name}).Info("pulled as a checkpoint image")
	}
	return nil
}
