package monitor

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// maxLogLine is where a long line is split into partial (P) entries, as kubelet expects.
const maxLogLine = 16 * 1024

// CRILog writes container output in the CRI log format:
// "<RFC3339Nano> <stdout|stderr> <P|F> <text>\n". Safe for concurrent streams.
type CRILog struct {
	mu       sync.Mutex
	dir, rel string
	f        *os.File
	buf      []byte // the entry being written, kept for the next
}

// OpenCRILog opens (appending) the log file at path, which must lie below the log
// directory dir; no symlink below dir is followed, now or at Reopen (see OpenLog).
func OpenCRILog(dir, path string) (*CRILog, error) {
	if dir == "" {
		dir = filepath.Dir(path)
	}
	rel, err := LogRel(dir, path)
	if err != nil {
		return nil, err
	}
	f, err := OpenLog(dir, rel)
	if err != nil {
		return nil, err
	}
	return &CRILog{dir: dir, rel: rel, f: f}, nil
}

// Copy reads r until EOF or error and writes each line as an entry of stream: a full line
// (its "\n" or "\r\n" dropped) as F; a line over maxLogLine in P parts; and output that
// ends without a newline as P, as containerd writes it, so that kubelet, which adds a
// newline after an F entry, gives back what the container wrote (`echo -n DONE` as a
// termination message from the log is "DONE").
func (l *CRILog) Copy(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			line = line[:len(line)-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			l.write(stream, "F", line)
			continue
		case err == bufio.ErrBufferFull:
			// "\r\n" may straddle the buffer: keep the \r for the next entry.
			if n := len(line); n > 1 && line[n-1] == '\r' {
				_ = br.UnreadByte()
				line = line[:n-1]
			}
			l.write(stream, "P", line)
			continue
		}
		if len(line) > 0 {
			l.write(stream, "P", line)
		}
		return
	}
}

func (l *CRILog) write(stream, tag string, text []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// One buffer for every entry: the monitor lives as long as its container, and an
	// allocation per line would only feed the garbage collector.
	buf := l.buf[:0]
	buf = time.Now().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, ' ')
	buf = append(buf, stream...)
	buf = append(buf, ' ')
	buf = append(buf, tag...)
	buf = append(buf, ' ')
	buf = append(buf, text...)
	buf = append(buf, '\n')
	l.buf = buf
	if l.f != nil {
		_, _ = l.f.Write(buf)
	}
}

// Reopen closes and reopens the file (after kubelet rotated it).
func (l *CRILog) Reopen() error {
	f, err := OpenLog(l.dir, l.rel)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.f
	l.f = f
	l.mu.Unlock()
	return old.Close()
}
