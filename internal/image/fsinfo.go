package image

import (
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// Usage is the space a part of the store takes.
type Usage struct {
	Mountpoint string
	Bytes      uint64
	Inodes     uint64
	Timestamp  time.Time
}

// fsCollector walks the store in the background and serves its last walk, so no request
// walks the store (a container with millions of files would stall kubelet's stats, and a
// walk is no place to hold a lock): every fsInterval, and soon after a change that frees
// or adds space (invalidate: a pull, a removal; not a container's create, see CreateRootfs),
// but never sooner than fsMinGap, nor than twice the last walk's length, after the last one
// began. A reading is at most fsInterval plus one walk old; each carries the time it was
// taken (Usage.Timestamp), which the CRI passes on.
type fsCollector struct {
	mu     sync.Mutex
	images Usage
	ctrs   Usage
	layers map[string]Usage // container ID -> its writable layer's diff usage
	at     time.Time

	ready chan struct{} // closed when the first walk is done
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

const (
	fsInterval = 10 * time.Second
	fsMinGap   = 2 * time.Second
	// fsFirstWait bounds how long a request waits for the first walk after start.
	fsFirstWait = 5 * time.Second
)

// invalidate asks for a walk soon: the store changed.
func (c *fsCollector) invalidate() {
	if c.kick == nil {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (s *Service) startFsCollector() {
	c := &s.fsCache
	c.ready, c.kick, c.stop, c.done = make(chan struct{}), make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.done)
		first := true
		for {
			start := time.Now()
			images, ctrs, layers := s.walkStore()
			logrus.WithFields(logrus.Fields{"took": time.Since(start), "containers": len(layers)}).Debug("store walked for disk usage")
			c.mu.Lock()
			c.images, c.ctrs, c.layers, c.at = images, ctrs, layers, images.Timestamp
			c.mu.Unlock()
			if first {
				close(c.ready)
				first = false
			}
			gap := max(fsMinGap, 2*time.Since(start))
			timer := time.NewTimer(fsInterval)
			select {
			case <-c.stop:
				timer.Stop()
				return
			case <-timer.C:
			case <-c.kick:
				timer.Stop()
				if wait := gap - time.Since(start); wait > 0 {
					select {
					case <-c.stop:
						return
					case <-time.After(wait):
					}
				}
			}
		}
	}()
}

func (s *Service) stopFsCollector() {
	if c := &s.fsCache; c.stop != nil {
		close(c.stop)
		<-c.done
	}
}

// awaitFirst waits (bounded) for the first walk; until it is done the store reads empty.
func (c *fsCollector) awaitFirst() {
	select {
	case <-c.ready: // the common case: no timer on kubelet's stats path
		return
	default:
	}
	t := time.NewTimer(fsFirstWait)
	defer t.Stop()
	select {
	case <-c.ready:
	case <-t.C:
	}
}

// FsInfo reports the image store (image layers) and the container store (writable
// layers) usage, both under the graph root, from the collector's last walk.
func (s *Service) FsInfo() (images, containers Usage) {
	c := &s.fsCache
	c.awaitFirst()
	c.mu.Lock()
	defer c.mu.Unlock()
	root := s.store.GraphRoot()
	images, containers = c.images, c.ctrs
	images.Mountpoint, containers.Mountpoint = root, root
	return images, containers
}

// RootfsUsage is the space container id's writable layer takes, from the collector's last
// walk (a layer made since reads empty, with that walk's time). It reads no store: it is
// on kubelet's stats path for every container.
func (s *Service) RootfsUsage(id string) (Usage, error) {
	c := &s.fsCache
	c.awaitFirst()
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.layers[id]
	if !ok {
		u = Usage{Timestamp: c.at}
	}
	u.Mountpoint = s.store.GraphRoot()
	return u, nil
}

func (s *Service) walkStore() (images, containers Usage, layers map[string]Usage) {
	root := s.store.GraphRoot()
	ctrLayers := map[string]string{} // writable layer ID -> container ID
	if ctrs, err := s.store.Containers(); err == nil {
		for _, c := range ctrs {
			ctrLayers[c.LayerID] = c.ID
		}
	}
	now := time.Now()
	images = Usage{Mountpoint: root, Timestamp: now}
	containers = Usage{Mountpoint: root, Timestamp: now}
	layers = map[string]Usage{}
	driverDir := filepath.Join(root, s.store.GraphDriverName())
	writableRoot := s.writableRoot()
	seen := map[uint64]bool{}
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == "merged" {
			// A mounted rootfs (<driver>/<layer>/merged, <writable>/<id>/merged): its files
			// are counted in its layers. A container's own directory of that name is not.
			if top := filepath.Dir(filepath.Dir(path)); top == driverDir || top == writableRoot {
				return filepath.SkipDir
			}
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		u := &images
		if rel, err := filepath.Rel(writableRoot, path); err == nil && rel[0] != '.' {
			// A writable layer of ours: <id>/upper is the container's.
			u = &containers
			if ctr, rest, _ := strings.Cut(rel, "/"); rest == "upper" || strings.HasPrefix(rest, "upper/") {
				l := layers[ctr]
				l.Bytes += uint64(st.Blocks) * 512
				l.Inodes++
				l.Timestamp = now
				layers[ctr] = l
			}
		} else if rel, err := filepath.Rel(driverDir, path); err == nil && rel != "." && rel[0] != '.' {
			first, rest, _ := strings.Cut(rel, "/")
			if ctr, ok := ctrLayers[first]; ok {
				u = &containers
				if rest == "diff" || strings.HasPrefix(rest, "diff/") {
					l := layers[ctr]
					l.Bytes += uint64(st.Blocks) * 512
					l.Inodes++
					l.Timestamp = now
					layers[ctr] = l
				}
			}
		}
		u.Bytes += uint64(st.Blocks) * 512
		u.Inodes++
		return nil
	})
	return images, containers, layers
}
