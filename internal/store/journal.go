package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// The journal is one append-only file per store, journalFile, holding every change to the
// records as an entry; the records are what replaying it gives. A write is answered once
// its entry is on disk (fdatasync), and the writes that wait while one is synced are
// appended and synced together, once (group commit): concurrent pod starts share their
// syncs instead of each paying a file's and a directory's. When the file has grown to
// several times its live records it is rewritten with one entry per record (compaction).
//
// An entry: u32 length of what follows, then op ('P' put, 'D' delete), u16 id length,
// u32 meta length and u32 status length (absentLen: not in this entry), id, meta,
// status, and a CRC-32C of all of it. Power loss can tear only the end of the file, the
// entries not yet synced, whose callers got no answer: replay stops at the first entry
// that is short or fails its CRC, and the file is cut there before it is appended to.
const (
	journalFile    = "journal"
	entryHeaderLen = 1 + 2 + 4 + 4
	absentLen      = ^uint32(0)
	opPut          = 'P'
	opDelete       = 'D'
	// compactMin: a journal smaller than this is never compacted.
	compactMin = 1 << 20
	// maxEntry bounds an entry read back (a torn length reads as garbage).
	maxEntry = 64 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// entry is one change: a put sets the record's metadata and/or status (nil: unchanged),
// a delete removes it.
type entry struct {
	op     byte
	id     string
	meta   []byte
	status []byte
}

// record is a record as replayed.
type record struct {
	meta, status []byte
}

func (e *entry) encode(buf []byte) []byte {
	lenOf := func(b []byte) uint32 {
		if b == nil {
			return absentLen
		}
		return uint32(len(b))
	}
	body := 4 + entryHeaderLen + len(e.id) + len(e.meta) + len(e.status) + 4
	start := len(buf)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(body-4))
	buf = append(buf, e.op)
	buf = binary.LittleEndian.AppendUint16(buf, uint16(len(e.id)))
	buf = binary.LittleEndian.AppendUint32(buf, lenOf(e.meta))
	buf = binary.LittleEndian.AppendUint32(buf, lenOf(e.status))
	buf = append(buf, e.id...)
	buf = append(buf, e.meta...)
	buf = append(buf, e.status...)
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf[start+4:], crcTable))
}

var errTorn = errors.New("torn entry")

// decodeEntry reads the entry at the start of b and returns it with its length.
func decodeEntry(b []byte) (entry, int, error) {
	if len(b) < 4 {
		return entry{}, 0, errTorn
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < entryHeaderLen+4 || n > maxEntry || len(b) < 4+n {
		return entry{}, 0, errTorn
	}
	body := b[4 : 4+n-4]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[4+n-4:]) {
		return entry{}, 0, errTorn
	}
	e := entry{op: body[0]}
	idLen := int(binary.LittleEndian.Uint16(body[1:]))
	metaLen, statusLen := binary.LittleEndian.Uint32(body[3:]), binary.LittleEndian.Uint32(body[7:])
	rest := body[entryHeaderLen:]
	take := func(l uint32) ([]byte, bool) {
		if l == absentLen {
			return nil, true
		}
		if int(l) > len(rest) {
			return nil, false
		}
		v := append([]byte{}, rest[:l]...)
		rest = rest[l:]
		return v, true
	}
	if idLen > len(rest) {
		return entry{}, 0, errTorn
	}
	e.id, rest = string(rest[:idLen]), rest[idLen:]
	var ok1, ok2 bool
	e.meta, ok1 = take(metaLen)
	e.status, ok2 = take(statusLen)
	if !ok1 || !ok2 || len(rest) != 0 || (e.op != opPut && e.op != opDelete) {
		return entry{}, 0, errTorn
	}
	return e, 4 + n, nil
}

// apply changes recs by e.
func apply(recs map[string]*record, e entry) {
	if e.op == opDelete {
		delete(recs, e.id)
		return
	}
	r := recs[e.id]
	if r == nil && e.meta == nil {
		return // a status for a record no longer there (deleted meanwhile): not a record
	}
	if r == nil {
		r = &record{}
		recs[e.id] = r
	}
	if e.meta != nil {
		r.meta = e.meta
	}
	if e.status != nil {
		r.status = e.status
	}
}

// replayed is what replay read from a journal.
type replayed struct {
	recs map[string]*record
	// end is the end of the last whole entry.
	end int64
	// damaged: an entry failed its check where a power loss cannot have torn it (between
	// good entries, or whole at the end).
	damaged bool
	// named are the IDs the damaged bytes still name (an entry's ID field, a record's
	// "id"): their records may have lost an entry.
	named map[string]bool
}

// replay reads the journal at path. A bad entry followed by good ones is damage, not a
// torn end (a power loss tears only the unsynced end): the good entries after it are
// replayed too, and damaged says so. So is a last entry whose length is whole but whose
// check fails: a torn write is short.
func replay(path string) (replayed, error) {
	r := replayed{recs: map[string]*record{}, named: map[string]bool{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return replayed{}, err
	}
	off := 0
	for off < len(b) {
		e, n, err := decodeEntry(b[off:])
		if err != nil {
			next := nextEntry(b, off+1)
			if next < 0 {
				if wholeEntryAt(b, off) {
					r.damaged = true
					namedIn(b[off:], r.named)
				}
				break // the torn end
			}
			r.damaged = true
			namedIn(b[off:next], r.named)
			off = next
			continue
		}
		apply(r.recs, e)
		off += n
		r.end = int64(off)
	}
	return r, nil
}

// wholeEntryAt says whether the length word at off announces an entry the file holds whole.
func wholeEntryAt(b []byte, off int) bool {
	if len(b)-off < 4 {
		return false
	}
	n := int(binary.LittleEndian.Uint32(b[off:]))
	return n >= entryHeaderLen+4 && n <= maxEntry && len(b)-off == 4+n
}

// idInJSON finds the "id" members of records' JSON in damaged bytes.
var idInJSON = regexp.MustCompile(`"id":"([0-9A-Za-z_.-]{1,256})"`)

// namedIn adds to named the IDs damaged bytes still name: the ID field of the entry
// that starts there, where its length reads as one, and every record "id" in them.
func namedIn(b []byte, named map[string]bool) {
	if len(b) >= 4+entryHeaderLen {
		if l := int(binary.LittleEndian.Uint16(b[5:])); l > 0 && l <= 256 && len(b) >= 4+entryHeaderLen+l {
			if id := string(b[4+entryHeaderLen : 4+entryHeaderLen+l]); ValidID(id) {
				named[id] = true
			}
		}
	}
	for _, m := range idInJSON.FindAllSubmatch(b, -1) {
		if id := string(m[1]); ValidID(id) {
			named[id] = true
		}
	}
}

// ValidID says whether id can name a record and its object's directory: letters, digits,
// '-', '_' and '.', not "." or "..".
func ValidID(id string) bool {
	if id == "" || id == "." || id == ".." || len(id) > 256 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// nextEntry is the offset of the first whole entry at or after from, or -1.
func nextEntry(b []byte, from int) int {
	for i := from; i+4+entryHeaderLen+4 <= len(b); i++ {
		if _, _, err := decodeEntry(b[i:]); err == nil {
			return i
		}
	}
	return -1
}

// openJournal replays the store's journal, cuts a torn end and opens it for appending.
// A journal that cannot be read, or one with damage, is kept aside for an operator and
// the store starts from what could be read: one bad sector must not keep the daemon, and
// every pod it still runs, from starting. What was lost is named by Damage and Lost, so
// that recovery keeps what those records described instead of taking it for leftovers.
func (s *Store) openJournal() error {
	path := filepath.Join(s.dir, journalFile)
	// A compaction a crash cut short: the journal itself is whole.
	if err := os.Remove(path + ".compact"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s.compact: %w", path, err)
	}
	r, err := replay(path)
	if err != nil {
		// Beside the store, not in it: a directory in it would read as a record of an
		// earlier release's layout.
		keep := fmt.Sprintf("%s.journal-unreadable-%d", s.dir, time.Now().UnixNano())
		if rerr := os.Rename(path, keep); rerr != nil {
			return fmt.Errorf("read journal %s: %w (and it could not be set aside: %v)", path, err, rerr)
		}
		if err := syncDir(filepath.Dir(s.dir)); err != nil {
			return fmt.Errorf("set aside unreadable journal %s: %w", path, err)
		}
		s.damage = fmt.Sprintf("the record journal %s could not be read (%v); it was set aside as %s and every record in it is lost", path, err, keep)
		s.unreadable = true
		logrus.WithFields(logrus.Fields{"journal": path, "kept": keep}).WithError(err).Error("the record journal could not be read; set aside, starting without its records (what they describe is kept, not removed)")
		r = replayed{recs: map[string]*record{}}
	} else if r.damaged {
		// Not what a power loss does: a disk error. Every good entry was read; the file
		// is kept as it is for an operator, and the journal rewritten from what was read.
		keep := fmt.Sprintf("%s.damaged-%d", path, time.Now().UnixNano())
		if err := copyFile(path, keep); err != nil {
			return fmt.Errorf("journal %s is damaged and could not be kept aside: %w", path, err)
		}
		for id := range r.named {
			if r.recs[id] == nil {
				s.lost = append(s.lost, id)
			}
		}
		sort.Strings(s.lost)
		s.damage = fmt.Sprintf("the record journal %s had damaged entries; every good entry was read, the damaged file kept as %s; records lost: %d (%s)", path, keep, len(s.lost), strings.Join(s.lost, ", "))
		logrus.WithFields(logrus.Fields{"journal": path, "kept": keep, "lost": s.lost}).Error("the record journal has a damaged entry; read every good entry and rewrote it (the damaged file is kept)")
		s.recs = r.recs
		if err := s.compactLocked(); err != nil {
			return fmt.Errorf("rewrite damaged journal %s: %w", path, err)
		}
		return nil
	}
	good := r.end
	// O_APPEND: every write lands at the end, whatever else holds the file (the root's
	// lock keeps a second daemon away; this keeps a stray writer from overwriting).
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open journal %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() > good {
		// Entries a power loss tore: no caller was answered for them.
		logrus.WithFields(logrus.Fields{"journal": path, "bytes": fi.Size() - good}).Warn("dropping the torn end of the record journal")
		if err = f.Truncate(good); err == nil {
			err = unix.Fdatasync(int(f.Fd()))
		}
	}
	if err == nil && fi.Size() == 0 {
		err = syncDir(s.dir) // a new journal's name is durable before any answer relies on it
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("open journal %s: %w", path, err)
	}
	s.f, s.size, s.recs = f, good, r.recs
	return nil
}

// Damage says what was wrong with the journal when the store was opened ("" when
// nothing was): for the daemon's Status.
func (s *Store) Damage() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.damage
}

// Unreadable says whether the journal could not be read at all when the store was opened:
// then no ID of a lost record is known (Lost), and every object was kept or removed by
// what its run directory showed.
func (s *Store) Unreadable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unreadable
}

// Lost returns the IDs that damaged journal entries named and whose records did not
// survive: their objects may still run.
func (s *Store) Lost() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lost)
}

// commit appends e and returns once it is synced: with the entries of every caller that
// came while the previous batch was being synced, in one write and one fdatasync. The
// caller that finds no batch in flight writes the pending ones, its own among them; the
// others wait for it, and one of those whose entry came too late writes the next.
func (s *Store) commit(e entry) error {
	p := &pendingEntry{e: e}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return fmt.Errorf("store %s is closed", s.dir)
	}
	if s.broken != nil {
		return s.broken
	}
	if len(e.id) > 0xffff || 4+entryHeaderLen+len(e.id)+len(e.meta)+len(e.status)+4 > maxEntry {
		return fmt.Errorf("store %s: record %.64s too large for the journal", s.dir, e.id)
	}
	s.pending = append(s.pending, p)
	for !p.done {
		if s.flushing {
			s.cond.Wait()
			continue
		}
		s.flushing = true
		batch := s.pending
		s.pending = nil
		s.mu.Unlock()
		err := s.writeBatch(batch)
		s.mu.Lock()
		for _, q := range batch {
			if err == nil {
				apply(s.recs, q.e)
			}
			q.done, q.err = true, err
		}
		if err == nil && s.size > compactMin && s.size > 4*s.liveBytes() {
			if cerr := s.compactLocked(); cerr != nil {
				logrus.WithError(cerr).WithField("store", s.dir).Warn("compact the record journal")
			}
		}
		s.flushing = false
		s.cond.Broadcast()
	}
	return p.err
}

type pendingEntry struct {
	e    entry
	done bool
	err  error
}

// writeBatch appends the batch and syncs it. On failure the file is cut back to its
// last whole entry, so that a failed batch is not replayed by a later daemon.
func (s *Store) writeBatch(batch []*pendingEntry) error {
	var buf []byte
	for _, p := range batch {
		buf = p.e.encode(buf)
	}
	if s.needDirSync {
		// A compaction's rename not yet durable: nothing written after it is answered
		// until it is.
		if err := syncDir(s.dir); err != nil {
			return fmt.Errorf("write record journal %s: %w", s.dir, err)
		}
		s.needDirSync = false
	}
	_, err := s.f.Write(buf)
	if err == nil {
		err = s.syncFile(s.f)
	}
	if err != nil {
		// Cut the batch back out, durably; if that fails the file cannot be trusted to
		// end with whole entries, and no later write is answered.
		cerr := s.f.Truncate(s.size)
		if cerr == nil {
			_, cerr = s.f.Seek(s.size, io.SeekStart)
		}
		if cerr == nil {
			cerr = unix.Fdatasync(int(s.f.Fd()))
		}
		if cerr != nil {
			s.broken = fmt.Errorf("record journal %s: a failed write could not be cut back out (%v) after: %w", s.dir, cerr, err)
		}
		return fmt.Errorf("write record journal %s: %w", s.dir, err)
	}
	s.size += int64(len(buf))
	return nil
}

// syncFile is fdatasync, unless a test has put a fault in its place.
func (s *Store) syncFile(f *os.File) error {
	if s.syncHook != nil {
		if err := s.syncHook(); err != nil {
			return err
		}
	}
	return unix.Fdatasync(int(f.Fd()))
}

// compactStep tells a test's compactHook which step of a compaction was reached.
func (s *Store) compactStep(step string) {
	if s.compactHook != nil {
		s.compactHook(step)
	}
}

func (s *Store) liveBytes() int64 {
	var n int64
	for id, r := range s.recs {
		n += int64(4 + entryHeaderLen + len(id) + len(r.meta) + len(r.status) + 4)
	}
	return n
}

// compactLocked rewrites the journal as one entry per record: written and synced beside
// it, renamed over it, the directory synced. A power loss at any point leaves the old
// file or the new one, each whole. Called with s.mu held and s.flushing set.
func (s *Store) compactLocked() error {
	var buf []byte
	for id, r := range s.recs {
		buf = (&entry{op: opPut, id: id, meta: r.meta, status: r.status}).encode(buf)
	}
	path := filepath.Join(s.dir, journalFile)
	tmp := path + ".compact"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(buf); err == nil {
		s.compactStep("written")
		err = s.syncFile(f)
	}
	if err == nil {
		s.compactStep("synced")
		err = os.Rename(tmp, path)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if s.f != nil {
		s.f.Close()
	}
	s.f, s.size = f, int64(len(buf))
	s.compactStep("renamed")
	if err := syncDir(s.dir); err != nil {
		s.needDirSync = true // the next batch syncs it before it is answered
		return err
	}
	return nil
}

// Close closes the journal; later writes fail.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.flushing {
		s.cond.Wait()
	}
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// importLegacy moves the records of the directory layout (one subdirectory per ID, with
// meta.json and status.json, as releases before the journal kept them) into the journal,
// synced, then removes their directories. A record whose files cannot be read stays as it
// is and Load returns it with its error, for the caller to quarantine.
func (s *Store) importLegacy() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("load store %s: %w", s.dir, err)
	}
	var moved []string
	for _, de := range entries {
		if !de.IsDir() {
			continue
		}
		id := de.Name()
		if _, ok := s.recs[id]; ok {
			// Imported already; a crash cut its directory's removal short.
			moved = append(moved, id)
			continue
		}
		meta, merr := readOptional(filepath.Join(s.dir, id, metaFile))
		status, serr := readOptional(filepath.Join(s.dir, id, statusFile))
		if merr != nil || serr != nil {
			s.legacyBad = append(s.legacyBad, Record{ID: id, Meta: meta, Status: status, Err: errors.Join(merr, serr)})
			continue
		}
		if meta == nil && status == nil {
			moved = append(moved, id) // a crash between mkdir and the first write: nothing to keep
			continue
		}
		if meta == nil {
			meta = []byte{} // kept as a record without metadata, for the caller to clean up
		}
		if err := s.commit(entry{op: opPut, id: id, meta: meta, status: status}); err != nil {
			return err
		}
		moved = append(moved, id)
	}
	for _, id := range moved {
		if err := os.RemoveAll(filepath.Join(s.dir, id)); err != nil {
			return fmt.Errorf("remove imported record %s: %w", id, err)
		}
	}
	if len(moved) > 0 {
		return syncDir(s.dir)
	}
	return nil
}

// lookup says whether a record of id is in the journal and whether its metadata is meta,
// without copying it (Save asks on every write).
func (s *Store) lookup(id string, meta []byte) (exists, sameMeta bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	return ok, ok && bytes.Equal(r.meta, meta)
}

// snapshotRecord returns a copy of the record of id, if any.
func (s *Store) snapshotRecord(id string) (record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[id]
	if !ok {
		return record{}, false
	}
	return record{meta: bytes.Clone(r.meta), status: bytes.Clone(r.status)}, true
}

// Read returns the records of the journal in dir as a daemon starting now would read
// them, without opening it for writing (tools and tests; an earlier release's record
// directories are not read).
func Read(dir string) ([]Record, error) {
	rp, err := replay(filepath.Join(dir, journalFile))
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(rp.recs))
	for id, r := range rp.recs {
		out = append(out, Record{ID: id, Meta: r.meta, Status: r.status})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return WriteFileAtomic(dst, b, 0o600)
}
