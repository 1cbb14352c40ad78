package image

import (
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Usage is the space a part of the store takes.
type Usage struct {
	Mountpoint string
	Bytes      uint64
	Inodes     uint64
	Timestamp  time.Time
}

// fsCache keeps the last walk of the store: kubelet asks every few seconds and a walk of
// a large store is not free. A change to the store bumps gen, which makes the cached
// answer stale without taking any lock (it is bumped under the image lock, on the path of
// every container create and remove). One walk runs at a time, outside every other lock.
type fsCache struct {
	gen atomic.Uint64

	walk sync.Mutex // held for a walk

	mu       sync.Mutex // guards the fields below
	at       time.Time
	atGen    uint64
	images   Usage
	ctrs     Usage
	computed bool
}

func (c *fsCache) invalidate() { c.gen.Add(1) }

func (c *fsCache) fresh() (Usage, Usage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := c.computed && c.atGen == c.gen.Load() && time.Since(c.at) < fsCacheTTL
	return c.images, c.ctrs, ok
}

const fsCacheTTL = 10 * time.Second

// FsInfo reports the image store (image layers) and the container store (writable
// layers) usage, both under the graph root.
func (s *Service) FsInfo() (images, containers Usage) {
	c := &s.fsCache
	if im, ct, ok := c.fresh(); ok {
		return im, ct
	}
	c.walk.Lock()
	defer c.walk.Unlock()
	if im, ct, ok := c.fresh(); ok { // another caller walked meanwhile
		return im, ct
	}
	gen := c.gen.Load()
	images, containers = s.walkStore()
	c.mu.Lock()
	c.at, c.atGen, c.images, c.ctrs, c.computed = images.Timestamp, gen, images, containers, true
	c.mu.Unlock()
	return images, containers
}

func (s *Service) walkStore() (images, containers Usage) {
	root := s.store.GraphRoot()
	ctrLayers := map[string]bool{}
	if ctrs, err := s.store.Containers(); err == nil {
		for _, c := range ctrs {
			ctrLayers[c.LayerID] = true
		}
	}
	now := time.Now()
	images = Usage{Mountpoint: root, Timestamp: now}
	containers = Usage{Mountpoint: root, Timestamp: now}
	driverDir := filepath.Join(root, s.store.GraphDriverName())
	seen := map[uint64]bool{}
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == "merged" {
			return filepath.SkipDir // a mounted rootfs: its files are counted in its layers
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
		if rel, err := filepath.Rel(driverDir, path); err == nil && rel != "." && rel[0] != '.' {
			first, _, _ := strings.Cut(rel, "/")
			if ctrLayers[first] {
				u = &containers
			}
		}
		u.Bytes += uint64(st.Blocks) * 512
		u.Inodes++
		return nil
	})
	return images, containers
}
