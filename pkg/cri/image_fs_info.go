package cri

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageFsInfo reports the space the image store and the containers' writable layers use.
// kubelet calls it to validate the image service and for image garbage collection.
func (s *Server) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	images, err := fsUsage(filepath.Join(s.Config.StateRoot, "images"))
	if err != nil {
		return nil, err
	}
	containers, err := fsUsage(filepath.Join(s.Config.StateRoot, "containers"))
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems:     []*runtimeapi.FilesystemUsage{images},
		ContainerFilesystems: []*runtimeapi.FilesystemUsage{containers},
	}, nil
}

// fsUsage sums the bytes and inodes used under dir (created if missing), counting each
// hard-linked inode once.
func fsUsage(dir string) (*runtimeapi.FilesystemUsage, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	var bytes, inodes uint64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // racing removals are not errors here
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
		inodes++
		bytes += uint64(st.Blocks) * 512
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: dir},
		UsedBytes:  &runtimeapi.UInt64Value{Value: bytes},
		InodesUsed: &runtimeapi.UInt64Value{Value: inodes},
	}, nil
}
