// Package image owns images and container root filesystems: it pulls through
// containers/image (registries, auth, mirrors, manifest lists, parallel layers), keeps
// images in a containers/storage overlay store shared by every handler, answers the CRI
// ImageService questions, and hands out writable rootfs layers for containers. It knows
// nothing of pods or runtimes.
package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	dockerref "github.com/containers/image/v5/docker/reference"
	"github.com/containers/image/v5/types"
	"github.com/containers/storage"
	"github.com/sirupsen/logrus"
	"golang.org/x/sync/singleflight"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// Options wire a Service.
type Options struct {
	StateRoot string // <state_root>: storage/ and tmp/ live below it
	RunRoot   string // <run_root>: storage run dir and the rendered registries.conf.d
	Config    config.Image
}

// Service is the image store.
type Service struct {
	store storage.Store
	sys   types.SystemContext // without per-request auth; read with pullContext
	sig   sigConfig           // the signature policy settings; read with pullContext
	sysMu sync.Mutex
	// dirUsers counts the pulls that use each registries drop-in directory; a directory a
	// reload replaced is removed once its last pull ends (retired), never under one.
	dirUsers map[string]int
	retired  map[string]bool
	// regMu orders registry reloads; regGen names each one's drop-in directory.
	regMu  sync.Mutex
	regGen int
	opts   Options
	pinned map[string]bool // normalized references
	// checkpointNames caches CheckpointName by image ID and reference
	// (checkpoint_image.go).
	checkpointNames checkpointCache
	// writable maps each container's writable layer of ours to its image's ID
	// (writable.go); under mu.
	writable map[string]string

	pulls singleflight.Group
	// mu guards the bookkeeping below, never a call that may wait for containers/storage's
	// locks (a pull holds its layer and container stores' for a layer's whole extraction)
	// or delete files: every CreateContainer takes it (CreateRootfs). What a removal or a
	// layer GC deletes is decided under it and deleted without it (remove.go).
	mu       sync.Mutex
	inFlight int
	// collecting: a layer GC (collect) is under way; a pull waits for its end to start
	// (gcDone), so that no GC takes a layer a pull has just made or reused.
	collecting bool
	gcDone     *sync.Cond
	// deleting holds the images whose deletion is under way without mu: CreateRootfs and
	// MountVolume refuse them, Status and List do not show them. The value says that a
	// user of the image went meanwhile, so the deleter looks at the users again.
	deleting map[string]bool
	// pending maps what is being made through containers/storage on an image without mu
	// (a rootfs with ID mappings, an image volume) to the image's ID: a user the store
	// may not list yet.
	pending map[string]string

	// sizes caches each image's size (ImageSize) by ID: computed when a pull ends (or
	// at start, or on first use), so that Status and List, on the create path, never
	// read layer records, whose lock a pull holds for a layer's whole extraction. An
	// image's size changes only by a pull (a manifest's big data) and by a layer
	// containers/storage maps for a user namespace; both refresh it. Under sizeMu.
	sizeMu sync.Mutex
	sizes  map[string]uint64

	fsCache fsCollector
}

// New opens (creating) the store and prepares the registry configuration.
func New(opts Options) (*Service, error) {
	storeOpts := storage.StoreOptions{
		RunRoot:         filepath.Join(opts.RunRoot, "storage"),
		GraphRoot:       filepath.Join(opts.StateRoot, "storage"),
		GraphDriverName: opts.Config.StorageDriver,
		// Containers' records and writable layers are transient (podman's and CRI-O's
		// transient_store): their records live in the run root and are written without
		// fsync, their overlays are mounted volatile. A container does not outlive a
		// reboot in the CRI (kubelet makes new ones), so what a sync would keep is never
		// read again, and the syncs were most of a CreateContainer's layer step (11.7 →
		// 4.8 ms here). Images stay durable.
		TransientStore: true,
	}
	store, err := storage.GetStore(storeOpts)
	if err != nil {
		return nil, fmt.Errorf("open image store %s (driver %s): %w", storeOpts.GraphRoot, storeOpts.GraphDriverName, err)
	}
	// After a reboot the transient records are gone and their layers' directories are
	// left in the graph root: remove what no record names (nothing else uses the store
	// yet).
	if err := store.GarbageCollect(); err != nil {
		logrus.WithError(err).WithField("root", storeOpts.GraphRoot).Warn("image store: remove the layers no record names")
	}
	// The store and its driver's home are made 0700; a container in a pod user namespace
	// is mounted by runc as the pod's root, another user, who must pass through them to
	// its own layer (which containers/storage gives that user). Searchable, no more:
	// every layer's directory stays 0700, and so do the containers' writable layers of
	// our own (writableMode).
	for _, dir := range []string{storeOpts.GraphRoot, filepath.Join(storeOpts.GraphRoot, store.GraphDriverName())} {
		if err := os.Chmod(dir, 0o711); err != nil {
			_, _ = store.Shutdown(true)
			return nil, fmt.Errorf("open image store: %w", err)
		}
	}
	// containers/storage makes its lock files in the graph root 0644, and the graph root
	// is searchable: any local user could open one and hold a read lock on it (fcntl),
	// and every write lock the store takes (a pull's, a rootfs's in containers/storage)
	// would wait for it, as long as that user likes. Root's alone: nothing but the
	// daemon locks them.
	for _, name := range []string{"storage.lock", "userns.lock"} {
		if err := os.Chmod(filepath.Join(storeOpts.GraphRoot, name), 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			_, _ = store.Shutdown(true)
			return nil, fmt.Errorf("open image store: %w", err)
		}
	}
	tmp := filepath.Join(opts.StateRoot, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		_, _ = store.Shutdown(true)
		return nil, fmt.Errorf("image service: temporary dir for large pulls %s: %w", tmp, err)
	}
	// No pull runs yet: what is in the temporary dir was left by pulls a crash ended (the
	// dir itself stays: an operator may have mounted a file system there).
	if left, err := os.ReadDir(tmp); err == nil {
		for _, en := range left {
			if err := os.RemoveAll(filepath.Join(tmp, en.Name())); err != nil {
				logrus.WithError(err).WithField("dir", tmp).Warn("image service: remove what crashed pulls left")
			}
		}
	}
	s := &Service{store: store, opts: opts, pinned: map[string]bool{}, deleting: map[string]bool{}, pending: map[string]string{}, sizes: map[string]uint64{}}
	s.gcDone = sync.NewCond(&s.mu)
	if err := s.loadWritable(); err != nil {
		_, _ = store.Shutdown(true)
		return nil, err
	}
	// And what a crash left in the store: layers of a pull, an image half removed.
	s.collect(0)
	// Every image's size, while no pull holds the layer store (sizes).
	if imgs, err := store.Images(); err == nil {
		for _, im := range imgs {
			s.refreshSize(im.ID)
		}
	}
	s.sys = types.SystemContext{BigFilesTemporaryDir: tmp, DockerRegistryUserAgent: "rtshimd"}
	if err := s.setupRegistries(); err != nil {
		s.closeWritable()
		_, _ = store.Shutdown(true)
		return nil, err
	}
	for _, p := range opts.Config.Pinned {
		named, err := normalize(p)
		if err != nil {
			s.closeWritable()
			_, _ = store.Shutdown(true)
			return nil, fmt.Errorf("image.pinned: %w", err)
		}
		s.pinned[named.String()] = true
	}
	s.startFsCollector()
	return s, nil
}

// Close releases the store (mounts of running containers stay).
func (s *Service) Close() {
	s.stopFsCollector()
	s.closeWritable()
	if _, err := s.store.Shutdown(false); err != nil {
		logrus.WithError(err).Warn("shut down image store")
	}
}

// normalize parses a reference the way Docker and containerd do: short names are
// docker.io/library/..., and a reference without tag or digest means :latest.
func normalize(ref string) (dockerref.Named, error) {
	if ref == "" {
		return nil, fmt.Errorf("image reference is empty: %w", errdefs.ErrInvalidArgument)
	}
	named, err := dockerref.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("image reference %q is not valid: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	return dockerref.TagNameOnly(named), nil
}

// Image is an image as the CRI reports it.
type Image struct {
	ID          string // "sha256:<config digest>"
	RepoTags    []string
	RepoDigests []string
	Size        uint64
	User        string // the image's USER
	Pinned      bool
	// Handler is the row whose own store holds the image, "" for the shared store
	// (Stores sets it).
	Handler   string
	storageID string
}

// UID and Username split the image's USER as the CRI wants them: a numeric user is a
// uid, anything else a name ("1000:1000" → uid 1000).
func (im *Image) UID() (uid *int64, name string) {
	u, _, _ := strings.Cut(im.User, ":")
	if u == "" {
		return nil, ""
	}
	if n, err := strconv.ParseInt(u, 10, 64); err == nil {
		return &n, ""
	}
	return nil, u
}

// RepoDigest is the image's repo digest ("repo@sha256:<manifest digest>") in the
// repository of name when it has one there, else its first; "" when it has none (an
// image never pulled from a registry).
func (im *Image) RepoDigest(name string) string {
	if named, err := dockerref.ParseNormalizedNamed(name); err == nil {
		for _, d := range im.RepoDigests {
			if dn, err := dockerref.ParseNormalizedNamed(d); err == nil && dn.Name() == named.Name() {
				return d
			}
		}
	}
	if len(im.RepoDigests) > 0 {
		return im.RepoDigests[0]
	}
	return ""
}

// lookup finds an image by ID ("sha256:..." or bare), ID prefix, tag or digest reference.
func (s *Service) lookup(ref string) (*storage.Image, error) {
	if ref == "" {
		return nil, fmt.Errorf("image reference is empty: %w", errdefs.ErrInvalidArgument)
	}
	id := strings.TrimPrefix(ref, "sha256:")
	if isHexID(id) {
		if img, err := s.store.Image(id); err == nil {
			return img, nil
		}
		if len(id) == 64 {
			return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
		}
	}
	named, err := normalize(ref)
	if err != nil {
		return nil, err
	}
	if canon, ok := named.(dockerref.Canonical); ok {
		// repo@digest: any image of that repository that has the manifest digest,
		// whichever name (tag or digest) it was pulled by.
		imgs, err := s.store.ImagesByDigest(canon.Digest())
		if err == nil {
			for _, img := range imgs {
				for _, n := range img.Names {
					if nn, err := dockerref.ParseNormalizedNamed(n); err == nil && nn.Name() == named.Name() {
						return img, nil
					}
				}
			}
		}
	}
	img, err := s.store.Image(named.String())
	if errors.Is(err, storage.ErrImageUnknown) {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, err)
	}
	return img, nil
}

func isHexID(s string) bool {
	if len(s) < 12 || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// removed reports whether RemoveImage took every name from an image that containers
// still use; such images are invisible and deleted with their last container.
func removed(img *storage.Image) bool { return len(img.Names) == 0 }

// describe turns a stored image into what the CRI reports.
func (s *Service) describe(img *storage.Image) *Image {
	out := &Image{ID: "sha256:" + img.ID, storageID: img.ID}
	repos := map[string]bool{}
	for _, n := range img.Names {
		named, err := dockerref.ParseNormalizedNamed(n)
		if err != nil {
			continue
		}
		repos[named.Name()] = true
		if _, ok := named.(dockerref.Tagged); ok {
			out.RepoTags = append(out.RepoTags, named.String())
		}
		if s.pinned[named.String()] {
			out.Pinned = true
		}
	}
	digests := img.Digests
	if len(digests) == 0 && img.Digest != "" {
		digests = append(digests, img.Digest)
	}
	for repo := range repos {
		for _, d := range digests {
			out.RepoDigests = append(out.RepoDigests, repo+"@"+d.String())
		}
	}
	slices.Sort(out.RepoDigests)
	out.Size = s.imageSize(img.ID)
	if cfg, err := s.configJSON(img); err == nil {
		var c struct {
			Config struct {
				User string `json:"User"`
			} `json:"config"`
		}
		if json.Unmarshal(cfg, &c) == nil {
			out.User = c.Config.User
		}
	}
	return out
}

// imageSize is image id's size (0 where the store cannot tell), from the cache where it
// is there (sizes).
func (s *Service) imageSize(id string) uint64 {
	s.sizeMu.Lock()
	size, ok := s.sizes[id]
	s.sizeMu.Unlock()
	if ok {
		return size
	}
	return s.refreshSize(id)
}

// refreshSize computes image id's size and caches it; an error is not cached (the next
// describe asks again) and reads as 0, as it did before the cache.
func (s *Service) refreshSize(id string) uint64 {
	n, err := s.store.ImageSize(id)
	if err != nil {
		return 0
	}
	size := uint64(0)
	if n > 0 {
		size = uint64(n)
	}
	s.sizeMu.Lock()
	s.sizes[id] = size
	s.sizeMu.Unlock()
	return size
}

// forgetSize drops image id's cached size, once it is deleted.
func (s *Service) forgetSize(id string) {
	s.sizeMu.Lock()
	delete(s.sizes, id)
	s.sizeMu.Unlock()
}

// isDeleting reports whether image id's deletion is under way (deleting).
func (s *Service) isDeleting(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.deleting[id]
	return ok
}

// configJSON is the image's config blob, as pulled.
func (s *Service) configJSON(img *storage.Image) ([]byte, error) {
	return s.store.ImageBigData(img.ID, "sha256:"+img.ID)
}

// Config returns the image's config blob (OCI or Docker schema2 JSON).
func (s *Service) Config(ref string) ([]byte, error) {
	img, err := s.lookup(ref)
	if err != nil {
		return nil, err
	}
	return s.configJSON(img)
}

// Status returns the image ref names, or ErrNotFound.
func (s *Service) Status(ref string) (*Image, error) {
	img, err := s.lookup(ref)
	if err != nil {
		return nil, err
	}
	if removed(img) || s.isDeleting(img.ID) {
		return nil, fmt.Errorf("image %q: %w", ref, errdefs.ErrNotFound)
	}
	return s.describe(img), nil
}

// List returns every image, or the one filter names.
func (s *Service) List(filter string) ([]*Image, error) {
	if filter != "" {
		im, err := s.Status(filter)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return []*Image{im}, nil
	}
	imgs, err := s.store.Images()
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	s.mu.Lock()
	deleting := maps.Clone(s.deleting)
	s.mu.Unlock()
	out := make([]*Image, 0, len(imgs))
	for i := range imgs {
		if _, gone := deleting[imgs[i].ID]; !gone && !removed(&imgs[i]) {
			out = append(out, s.describe(&imgs[i]))
		}
	}
	return out, nil
}
