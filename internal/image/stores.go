package image

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// StoresDir is the directory below the state and run roots that holds the handlers' own
// stores, one directory per row.
const StoresDir = "image-stores"

// StoreOf resolves a runtime handler as an ImageSpec names it ("" for the default) to its
// row and whether the row keeps its own images (image_store = "separate"). The daemon
// answers from the handler table; a handler the node does not have is an error.
type StoreOf func(handler string) (row string, separate bool, err error)

// Stores is the node's image stores: the shared one, which every row uses unless it asks
// for its own, and a store of its own for each row that does (images per RuntimeClass,
// KEP-4216; containerd keys images by the handler's platform and snapshotter, CRI-O has
// one store). The CRI's image calls go to the store of their ImageSpec's runtime_handler,
// a container's rootfs and image volumes to the store of its pod's row, and a call by
// container ID to the store that holds the container.
type Stores struct {
	opts    Options
	storeOf StoreOf

	mu     sync.Mutex
	shared *Service
	own    map[string]*Service // a row's own store, by row name
	// owner maps each container whose rootfs is in a row's own store to that store
	// (any other is the shared store's), so that the calls by container ID, RootfsUsage
	// among them on every stats call, ask no store which has it.
	owner map[string]*Service
	// separate is each row's choice as first seen: at start, or at the first use of a row
	// a reload added. A reload that changes it takes effect at restart
	// (config.RestartNeeded), so no image changes stores under a running pod.
	separate map[string]bool
}

// NewStores opens the shared store and the own store of each row of rows (row name →
// separate) that asks for one. A store left on disk by a row that no longer asks for it is
// removed when no container uses it, else kept for its containers until a later start.
func NewStores(opts Options, storeOf StoreOf, rows map[string]bool) (*Stores, error) {
	shared, err := New(opts)
	if err != nil {
		return nil, err
	}
	s := &Stores{opts: opts, storeOf: storeOf, shared: shared, own: map[string]*Service{}, owner: map[string]*Service{}, separate: map[string]bool{}}
	for row, sep := range rows {
		s.separate[row] = sep
		if sep {
			if _, err := s.openOwn(row); err != nil {
				s.Close()
				return nil, err
			}
		}
	}
	left, _ := os.ReadDir(filepath.Join(opts.StateRoot, StoresDir))
	for _, en := range left {
		row := en.Name()
		if !en.IsDir() || s.own[row] != nil {
			continue
		}
		svc, err := s.openOwn(row)
		if err != nil {
			s.Close()
			return nil, err
		}
		log := logrus.WithFields(logrus.Fields{"handler": row, "dir": svc.opts.StateRoot})
		if !svc.unused() {
			log.Warn("image store of a handler that no longer asks for its own images: kept for the containers in it, removed at a later start")
			continue
		}
		delete(s.own, row)
		svc.Close()
		for _, dir := range []string{svc.opts.StateRoot, svc.opts.RunRoot} {
			if err := os.RemoveAll(dir); err != nil {
				log.WithError(err).Warn("remove the image store of a handler that no longer asks for its own images")
			}
		}
		log.Info("removed the image store of a handler that no longer asks for its own images")
	}
	return s, nil
}

// openOwn opens (creating) row's own store; under s.mu or before s is shared.
func (s *Stores) openOwn(row string) (*Service, error) {
	if !validWritableID(row) {
		return nil, fmt.Errorf("image store of handler %q: not a name for a directory: %w", row, errdefs.ErrInvalidArgument)
	}
	o := s.opts
	o.StateRoot = filepath.Join(s.opts.StateRoot, StoresDir, row)
	o.RunRoot = filepath.Join(s.opts.RunRoot, StoresDir, row)
	// Searchable as the shared store's parents are: a container in a pod user namespace
	// is mounted as another user, who must pass through to its own layer.
	for _, dir := range []string{filepath.Dir(o.StateRoot), o.StateRoot} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return nil, fmt.Errorf("image store of handler %q: %w", row, err)
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return nil, fmt.Errorf("image store of handler %q: %w", row, err)
		}
	}
	svc, err := New(o)
	if err != nil {
		return nil, fmt.Errorf("image store of handler %q: %w", row, err)
	}
	s.own[row] = svc
	for _, id := range svc.rootfsOwners() {
		s.owner[id] = svc
	}
	logrus.WithFields(logrus.Fields{"handler": row, "dir": o.StateRoot}).Info("opened the handler's own image store")
	return svc, nil
}

// storeFor returns the store of handler ("" for the default) and its row's name when that
// is a store of the row's own ("" for the shared store). A name the table does not have is
// a pod's row a reload removed, or a row's store left at start: its own store where one is
// open, else the shared one. The CRI's image calls are checked against the table first
// (cri.checkImageHandler), so only a pod's row gets here unknown.
func (s *Stores) storeFor(handler string) (*Service, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sep, decided := s.separate[handler]
	row := handler
	if !decided || handler == "" {
		r, want, err := s.storeOf(handler)
		switch {
		case err != nil && handler != "" && s.own[handler] != nil:
			return s.own[handler], handler, nil
		case err != nil && handler != "":
			return s.shared, "", nil
		case err != nil:
			return nil, "", err
		}
		row = r
		if sep, decided = s.separate[row]; !decided {
			sep = want
			s.separate[row] = sep
		}
	}
	if !sep {
		return s.shared, "", nil
	}
	if svc := s.own[row]; svc != nil {
		return svc, row, nil
	}
	svc, err := s.openOwn(row)
	if err != nil {
		return nil, "", err
	}
	return svc, row, nil
}

// holder returns the store that holds container id's rootfs, the shared one if no own
// store does.
func (s *Stores) holder(id string) *Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	if svc := s.owner[id]; svc != nil {
		return svc
	}
	return s.shared
}

// all is every open store, the shared one first.
func (s *Stores) all() []*Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*Service{s.shared}
	for _, row := range s.rows(false) {
		out = append(out, s.own[row])
	}
	return out
}

// rows names the open own stores, sorted; listed only those whose row uses them now.
func (s *Stores) rows(listed bool) []string {
	var out []string
	for row := range s.own {
		if !listed || s.separate[row] {
			out = append(out, row)
		}
	}
	sort.Strings(out)
	return out
}

// notPulled adds to an absent image of a row's own store where kubelet pulls it from.
func notPulled(err error, row string) error {
	if row == "" || !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%w in the image store of runtime handler %q (image_store = \"separate\"): pull it for that handler (kubelet does with its RuntimeClassInImageCriApi feature gate)", err, row)
}

// mark names the row whose own store im came from ("" for the shared store).
func mark(im *Image, row string) *Image {
	if im != nil {
		im.Handler = row
	}
	return im
}

// Pull pulls ref into handler's store and returns the image's ID.
func (s *Stores) Pull(ctx context.Context, handler, ref string, auth Auth, namespace string) (string, error) {
	svc, _, err := s.storeFor(handler)
	if err != nil {
		return "", err
	}
	return svc.Pull(ctx, ref, auth, namespace)
}

// Status describes image ref of handler's store; ErrNotFound when it has none.
func (s *Stores) Status(handler, ref string) (*Image, error) {
	svc, row, err := s.storeFor(handler)
	if err != nil {
		return nil, err
	}
	im, err := svc.Status(ref)
	return mark(im, row), notPulled(err, row)
}

// Config is the config JSON of image ref of handler's store.
func (s *Stores) Config(handler, ref string) ([]byte, error) {
	svc, row, err := s.storeFor(handler)
	if err != nil {
		return nil, err
	}
	b, err := svc.Config(ref)
	return b, notPulled(err, row)
}

// Remove removes image ref from handler's store; idempotent.
func (s *Stores) Remove(handler, ref string) error {
	svc, _, err := s.storeFor(handler)
	if err != nil {
		return err
	}
	return svc.Remove(ref)
}

// List lists the images of handler's store, or of every store its row uses when handler
// is "" (as kubelet's image GC lists them: each names its handler, Image.Handler), or the
// one filter names.
func (s *Stores) List(handler string, all bool, filter string) ([]*Image, error) {
	type part struct {
		svc *Service
		row string
	}
	var parts []part
	if all {
		s.mu.Lock()
		parts = append(parts, part{s.shared, ""})
		for _, row := range s.rows(true) {
			parts = append(parts, part{s.own[row], row})
		}
		s.mu.Unlock()
	} else {
		svc, row, err := s.storeFor(handler)
		if err != nil {
			return nil, err
		}
		parts = append(parts, part{svc, row})
	}
	var out []*Image
	for _, p := range parts {
		imgs, err := p.svc.List(filter)
		if err != nil {
			return nil, err
		}
		for _, im := range imgs {
			out = append(out, mark(im, p.row))
		}
	}
	return out, nil
}

// FsInfo sums the stores' usage; the shared store's mount point names it (the stores lie
// below one state root, and kubelet reads one image file system).
func (s *Stores) FsInfo() (images, containers Usage) {
	for i, svc := range s.all() {
		im, ct := svc.FsInfo()
		if i == 0 {
			images, containers = im, ct
			continue
		}
		images.Bytes += im.Bytes
		images.Inodes += im.Inodes
		containers.Bytes += ct.Bytes
		containers.Inodes += ct.Inodes
	}
	return images, containers
}

// SetRegistries applies the registries' settings to every store; a store that refuses
// them sets the earlier ones back on the stores done before it.
func (s *Stores) SetRegistries(old, cfg config.Image) error {
	stores := s.all()
	for i, svc := range stores {
		if err := svc.SetRegistries(cfg); err != nil {
			for _, done := range stores[:i] {
				if rerr := done.SetRegistries(old); rerr != nil {
					logrus.WithError(rerr).Error("image registries: set the previous settings back")
				}
			}
			return err
		}
	}
	s.mu.Lock()
	s.opts.Config = cfg // for the stores opened later
	s.mu.Unlock()
	return nil
}

// SameStore reports whether two handlers ("" for the default) keep their images in one
// store.
func (s *Stores) SameStore(a, b string) (bool, error) {
	sa, _, err := s.storeFor(a)
	if err != nil {
		return false, err
	}
	sb, _, err := s.storeFor(b)
	if err != nil {
		return false, err
	}
	return sa == sb, nil
}

// Close closes every store.
func (s *Stores) Close() {
	for _, svc := range s.all() {
		svc.Close()
	}
}

// CreateRootfs makes container id's rootfs from image ref of its pod's row's store.
func (s *Stores) CreateRootfs(handler, id, ref string, uids, gids []specs.LinuxIDMapping) (rootfs, imageID string, err error) {
	svc, row, err := s.storeFor(handler)
	if err != nil {
		return "", "", err
	}
	rootfs, imageID, err = svc.CreateRootfs(id, ref, uids, gids)
	if err == nil && svc != s.shared {
		s.mu.Lock()
		s.owner[id] = svc
		s.mu.Unlock()
	}
	return rootfs, imageID, notPulled(err, row)
}

// MountVolume mounts image ref of the pod's row's store as container owner's volume.
func (s *Stores) MountVolume(handler, owner string, index int, ref string, uids, gids []specs.LinuxIDMapping) (*Volume, error) {
	svc, row, err := s.storeFor(handler)
	if err != nil {
		return nil, err
	}
	v, err := svc.MountVolume(owner, index, ref, uids, gids)
	return v, notPulled(err, row)
}

// RemoveRootfs removes container id's rootfs from the store that holds it.
func (s *Stores) RemoveRootfs(id string) error {
	if err := s.holder(id).RemoveRootfs(id); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.owner, id)
	s.mu.Unlock()
	return nil
}

// DetachRootfs detaches container id's rootfs from the node's mount table.
func (s *Stores) DetachRootfs(id string) { s.holder(id).DetachRootfs(id) }

// RootfsUsage is the space container id's writable layer takes.
func (s *Stores) RootfsUsage(id string) (Usage, error) { return s.holder(id).RootfsUsage(id) }

// RemoveVolumes removes container owner's image volumes from every store.
func (s *Stores) RemoveVolumes(owner string) error {
	var errs []error
	for _, svc := range s.all() {
		errs = append(errs, svc.RemoveVolumes(owner))
	}
	return errors.Join(errs...)
}

// VolumeOwners lists the containers that hold image volumes in any store.
func (s *Stores) VolumeOwners() ([]string, error) {
	var out []string
	for _, svc := range s.all() {
		owners, err := svc.VolumeOwners()
		if err != nil {
			return nil, err
		}
		for _, o := range owners {
			if !slices.Contains(out, o) {
				out = append(out, o)
			}
		}
	}
	return out, nil
}
