package image

import (
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
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

// fsCache keeps the last walk: kubelet asks every few seconds and a walk of a large store
// is not free. Any change to the store invalidates it.
type fsCache struct {
	sync.Mutex
	at     time.Time
	images Usage
	ctrs   Usage
}

func (c *fsCache) invalidate() {
	c.Lock()
	c.at = time.Time{}
	c.Unlock()
}

const fsCacheTTL = 5 * time.Second

// FsInfo reports the image store (image layers) and the container store (writable
// layers) usage, both under the graph root.
func (s *Service) FsInfo() (images, containers Usage) {
	c := &s.fsCache
	c.Lock()
	defer c.Unlock()
	if time.Since(c.at) < fsCacheTTL {
		return c.images, c.ctrs
	}
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
	c.at, c.images, c.ctrs = now, images, containers
	return images, containers
}
