package registry

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/store"
)

// Recovery is what a manager gives Recover: its records and run directories, and what it
// does with each kind of record it finds.
type Recovery[T Entry] struct {
	Store  *store.Store
	RunDir string // one directory per object, named by its ID
	// Field names the object in logs ("sandbox", "container"); Object in messages
	// ("pod", "container").
	Field, Object string
	// Unwritten settles a record without metadata: a crash between its mkdir and its
	// first write.
	Unwritten func(id string, log *logrus.Entry)
	Decode    func(id string, meta, status []byte) (T, error)
	// Leave says whether a record Decode refused is left as it is for a later daemon (one
	// that has its runtime), and notes it; any other refusal is quarantined.
	Leave func(id string, err error) bool
	// Settle reconciles a decoded object with the node and says whether to list it; one
	// not listed it has cleaned up (or listed itself), or it says why its record is to be
	// set aside after all.
	Settle func(v T, log *logrus.Entry) (list bool, quarantine string)
	// State is what the log says of a listed object.
	State func(v T) string
	// Quarantined settles an object whose record was set aside as bad, at path.
	Quarantined func(ctx context.Context, id, path string, log *logrus.Entry)
	// Unrecorded settles a run directory that no record names (a record a damaged
	// journal lost, or never written).
	Unrecorded func(ctx context.Context, id string)
}

// Recover loads every record of r.Store and settles each, then the run directories no
// record names. It returns the IDs it knows: those with a record, and the kept ones.
func (x *Index[T]) Recover(ctx context.Context, r Recovery[T]) (map[string]bool, error) {
	recs, err := r.Store.Load()
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	x.mu.Lock()
	x.kept = map[string]keptObject{}
	x.mu.Unlock()
	for _, rec := range recs {
		known[rec.ID] = true
		log := logrus.WithField(r.Field, rec.ID)
		if rec.Err != nil {
			x.quarantine(ctx, r, rec.ID, fmt.Sprintf("unreadable: %v", rec.Err))
			continue
		}
		if rec.Meta == nil {
			r.Unwritten(rec.ID, log)
			continue
		}
		v, err := r.Decode(rec.ID, rec.Meta, rec.Status)
		if err != nil {
			if !r.Leave(rec.ID, err) {
				x.quarantine(ctx, r, rec.ID, fmt.Sprintf("undecodable: %v", err))
			}
			continue
		}
		list, why := r.Settle(v, log)
		switch {
		case why != "":
			x.quarantine(ctx, r, rec.ID, why)
		case list:
			x.Add(v)
			log.WithField("state", r.State(v)).Infof("%s recovered", r.Field)
		}
	}
	unrecorded := map[string]bool{}
	entries, _ := os.ReadDir(r.RunDir)
	for _, e := range entries {
		if e.IsDir() && !known[e.Name()] {
			unrecorded[e.Name()] = true
		}
	}
	// A lost record's object has its run directory (made before anything runs): an ID
	// the damaged bytes name without one is only said (a garbled ID, or one a tenant's
	// label spelled), never acted on.
	for _, id := range r.Store.Lost() {
		if !known[id] && !unrecorded[id] {
			logrus.WithField("id", id).Warnf("a damaged record journal names this ID, but no %s directory of it exists; nothing to keep or clean up", r.Object)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(unrecorded)) {
		r.Unrecorded(ctx, id)
	}
	for _, id := range x.KeptIDs() {
		known[id] = true
	}
	return known, nil
}

// quarantine sets a bad record aside and lets the manager settle its object.
func (x *Index[T]) quarantine(ctx context.Context, r Recovery[T], id, why string) {
	log := logrus.WithFields(logrus.Fields{r.Field: id, "reason": why})
	path, err := r.Store.Quarantine(id, why)
	if path == "" {
		log.WithError(err).Errorf("bad %s record could not be set aside; left as it is, %s not listed", r.Field, r.Object)
		return
	}
	if err != nil {
		log.WithError(err).Warnf("bad %s record set aside, but not all of it was synced", r.Field)
	}
	r.Quarantined(ctx, id, path, log.WithField("quarantined_at", path))
}

// KeptEntry is the quarantine entry an earlier start kept id under, if any.
func KeptEntry(s *store.Store, id string) string {
	q, _ := s.ListQuarantined()
	for _, e := range q {
		if e.ID == id && e.Kept {
			return e.Path
		}
	}
	return ""
}

// Quarantined lists the records of s set aside as unreadable (Status verbose shows them);
// field names the records in the log of a failure to list them.
func Quarantined(s *store.Store, field string) []store.Quarantined {
	q, err := s.ListQuarantined()
	if err != nil {
		logrus.WithError(err).Warnf("list quarantined %s records", field)
	}
	return q
}

// StopKept stops the objects of s's kept quarantine entries that want selects: stop ends
// one and says whether it did; one stopped has its entry marked no longer kept and leaves
// the kept set. It returns the IDs stopped. field names the object in logs.
func (x *Index[T]) StopKept(s *store.Store, field string, want func(store.Quarantined) bool, stop func(id string, log *logrus.Entry) bool) []string {
	var done []string
	for _, e := range Quarantined(s, field) {
		if !e.Kept || !want(e) {
			continue
		}
		log := logrus.WithFields(logrus.Fields{field: e.ID, "quarantined_at": e.Path})
		if !stop(e.ID, log) {
			continue
		}
		if err := store.MarkKept(e.Path, false); err != nil {
			log.WithError(err).Warnf("mark a stopped %s's quarantine entry", field)
		}
		x.Unkeep(e.ID)
		done = append(done, e.ID)
	}
	return done
}
