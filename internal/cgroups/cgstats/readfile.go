package cgstats

import (
	"bytes"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// bufs are the read buffers of readFile: kubelet's stats path reads thousands of files
// per call at 1,000 pods, each a few hundred bytes.
var bufs = sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}

// readFile reads a small file (a cgroup or /proc file) whole and hands its bytes to parse,
// which must not keep them. It makes bare system calls: os.ReadFile stats the file for its
// size first, and a cgroup file is pollable, so the Go runtime adds each one to its epoll
// set and takes it out again at close; in profiles at 1,000 pods those doubled the system
// calls of a stats list.
func readFile(path string, parse func([]byte)) error {
	fd, err := open(path)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	bp := bufs.Get().(*[]byte)
	defer bufs.Put(bp)
	buf := (*bp)[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // a file larger than the buffer: grow it
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	*bp = buf[:0]
	parse(buf)
	return nil
}

func open(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// readUint reads a file holding one number.
func readUint(path string) (uint64, error) {
	var v uint64
	var perr error
	if err := readFile(path, func(b []byte) {
		v, perr = strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	}); err != nil {
		return 0, err
	}
	return v, perr
}

// eachKV calls f for every "key value" line of b whose value is a number. The key aliases
// b: f converts it to keep it.
func eachKV(b []byte, f func(k []byte, v uint64)) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64); err == nil {
			f(k, n)
		}
	}
}

// readKV parses "key value" lines; nil if the file cannot be read.
func readKV(path string) map[string]uint64 {
	var out map[string]uint64
	if err := readFile(path, func(b []byte) {
		out = map[string]uint64{}
		eachKV(b, func(k []byte, v uint64) { out[string(k)] = v })
	}); err != nil {
		return nil
	}
	return out
}

// readString is readFile's bytes as a string, for parsers that split them.
func readString(path string) (string, error) {
	var s string
	err := readFile(path, func(b []byte) { s = string(b) })
	return s, err
}
