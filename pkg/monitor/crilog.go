package monitor

import (
	"bufio"
	"io"
	"log"
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
	dropped  int    // entries lost since the last written
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
	if l.f == nil {
		return
	}
	// An error (a full disk, most often) drops the entry whole: the file is cut back to
	// where it began, so that no torn line runs into the next entry (kubelet skips a line
	// it cannot parse, and would lose both). The monitor's log says when dropping starts
	// and how many entries it cost.
	n, err := l.f.Write(buf)
	if err != nil {
		if n > 0 {
			if fi, serr := l.f.Stat(); serr == nil {
				_ = l.f.Truncate(fi.Size() - int64(n))
			}
		}
		if l.dropped++; l.dropped == 1 {
			log.Printf("container log: %v; entries are dropped until a write succeeds", err)
		}
		return
	}
	if l.dropped > 0 {
		log.Printf("container log: writing again; %d entries were dropped", l.dropped)
		l.dropped = 0
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
