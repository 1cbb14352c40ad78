// Package registry is the daemon's index of its pods and of its containers, one Index of
// each, with the rules both keep: objects by ID, found by a unique ID prefix as crictl and
// containerd accept them; names reserved from the request that makes an object until its
// removal; containers by their pod; the objects kept without a usable record, their names
// (every attempt) reserved, and their stop when an operator asks (StopKept); the recovery
// of both from their records at start (Recover); and an object's end, which waiters
// select on (Exit).
package registry

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// Key is how an object is indexed.
type Key struct {
	ID   string
	Name string
	// Pod is a container's pod; empty for a pod, which is indexed by ID and name only.
	Pod string
}

// Entry is what an Index holds.
type Entry interface {
	comparable
	RegistryKey() Key
	// OpLock is the object's lifecycle lock (start, stop, removal), which Hold takes.
	OpLock() sync.Locker
}

// Index holds the objects of one kind.
type Index[T Entry] struct {
	field, noun string // the request field and the object, in errors: "container_id", "container"

	mu    sync.RWMutex
	byID  map[string]T
	names map[string]string // name -> ID, reserved or listed
	// byPod: kubelet's stats calls and the collector ask for each pod's containers, and a
	// scan of all of them per pod was O(pods²) (a third of the daemon's idle CPU at 1,000
	// pods).
	byPod map[string]map[string]T
	// kept: objects without a usable record that still ran at recovery, by ID: left
	// running, with their files, until an operator decides.
	kept map[string]keptObject
}

// keptObject is what an Index knows of a kept object.
type keptObject struct {
	path string // its quarantine entry
	// family is its name without the attempt (Family), "" when unknown: kubelet, which
	// cannot see the object, makes another of the same pod or container (attempt 0, or
	// the next), which would run beside it with the same pod UID and volumes.
	family string
}

// New returns an empty index; field and noun name the request field and the object in
// errors ("pod_sandbox_id", "pod sandbox").
func New[T Entry](field, noun string) *Index[T] {
	return &Index[T]{field: field, noun: noun, byID: map[string]T{}, names: map[string]string{},
		byPod: map[string]map[string]T{}, kept: map[string]keptObject{}}
}

// Reserve takes name for a new object and returns the object's new ID, and release, for
// the create to defer: it frees the name unless the object was listed by then (Add), after
// which the name is the object's until Remove. A name of a kept object's family, whatever
// its attempt, is refused (FailedPrecondition) until an operator has decided on it.
func (x *Index[T]) Reserve(name string) (id string, release func(), err error) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	id = hex.EncodeToString(b[:])
	x.mu.Lock()
	defer x.mu.Unlock()
	if other, ok := x.names[name]; ok {
		return "", nil, fmt.Errorf("%s name %q is already used by %s %s; remove it first: %w", x.noun, name, x.noun, other, errdefs.ErrAlreadyExists)
	}
	if fam := Family(name); len(x.kept) > 0 {
		for other, k := range x.kept {
			if k.family == fam {
				return "", nil, fmt.Errorf("%s name %q: %s %s, of the same name (any attempt), still runs without a usable record and is kept until an operator decides, and a second one would run beside it: stop it with `rtshimd quarantine stop %s`, or mend its record and adopt it (`rtshimd quarantine adopt %s`, the daemon stopped): %w",
					x.noun, name, x.noun, other, other, other, errdefs.ErrFailedPrecondition)
			}
		}
	}
	x.names[name] = id
	return id, func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if _, listed := x.byID[id]; !listed {
			x.release(name, id)
		}
	}, nil
}

func (x *Index[T]) release(name, id string) {
	if x.names[name] == id {
		delete(x.names, name)
	}
}

// Add lists v, its name taken for it.
func (x *Index[T]) Add(v T) {
	k := v.RegistryKey()
	x.mu.Lock()
	defer x.mu.Unlock()
	x.byID[k.ID] = v
	x.names[k.Name] = k.ID
	if k.Pod != "" {
		of := x.byPod[k.Pod]
		if of == nil {
			of = map[string]T{}
			x.byPod[k.Pod] = of
		}
		of[k.ID] = v
	}
}

// Remove unlists v and frees its name.
func (x *Index[T]) Remove(v T) {
	k := v.RegistryKey()
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.byID, k.ID)
	x.release(k.Name, k.ID)
	if of := x.byPod[k.Pod]; of != nil {
		delete(of, k.ID)
		if len(of) == 0 {
			delete(x.byPod, k.Pod)
		}
	}
}

// Get finds an object by ID or unique ID prefix.
func (x *Index[T]) Get(id string) (T, error) {
	var zero T
	if id == "" {
		return zero, fmt.Errorf("%s is empty: %w", x.field, errdefs.ErrInvalidArgument)
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if v, ok := x.byID[id]; ok {
		return v, nil
	}
	var found T
	n := 0
	for k, v := range x.byID {
		if strings.HasPrefix(k, id) {
			found = v
			n++
		}
	}
	switch n {
	case 0:
		return zero, fmt.Errorf("%s %q: %w", x.noun, id, errdefs.ErrNotFound)
	case 1:
		return found, nil
	}
	return zero, fmt.Errorf("%s %q is ambiguous: it is a prefix of %d %ss' IDs; give more of it: %w", x.field, id, n, x.noun, errdefs.ErrInvalidArgument)
}

// Listed says whether the object with exactly this ID is listed.
func (x *Index[T]) Listed(id string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.byID[id]
	return ok
}

// Hold finds id and takes its lifecycle lock once it is still listed (a removal that held
// the lock first unlisted it). ok is false, with no error, for an object that is gone: a
// stop or removal of it is done.
func (x *Index[T]) Hold(id string) (v T, unlock func(), ok bool, err error) {
	v, err = x.Get(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return v, nil, false, nil
	}
	if err != nil {
		return v, nil, false, err
	}
	l := v.OpLock()
	l.Lock()
	if !x.Listed(v.RegistryKey().ID) {
		l.Unlock()
		return v, nil, false, nil
	}
	return v, l.Unlock, true, nil
}

// All returns every object, in no order.
func (x *Index[T]) All() []T {
	return x.Pick("", "")
}

// Len is the number of objects listed.
func (x *Index[T]) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byID)
}

// Pick returns the objects whose ID starts with id and, for containers, whose pod's ID
// starts with pod (either may be empty). The lock is held only to copy: callers filter
// further without it, so a List does not hold up a create.
func (x *Index[T]) Pick(id, pod string) []T {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if of, ok := x.byPod[pod]; ok && id == "" {
		out := make([]T, 0, len(of))
		for _, v := range of {
			out = append(out, v)
		}
		return out
	}
	out := make([]T, 0, len(x.byID))
	for k, v := range x.byID {
		if id != "" && !strings.HasPrefix(k, id) {
			continue
		}
		if pod != "" && !strings.HasPrefix(v.RegistryKey().Pod, pod) {
			continue
		}
		out = append(out, v)
	}
	return out
}

// OfPod is the objects of pod, by its full ID (none for a pod the index does not know).
func (x *Index[T]) OfPod(pod string) []T {
	x.mu.RLock()
	defer x.mu.RUnlock()
	of := x.byPod[pod]
	if len(of) == 0 {
		return nil
	}
	out := make([]T, 0, len(of))
	for _, v := range of {
		out = append(out, v)
	}
	return out
}

// Keep records that id, which has no usable record, is kept under its quarantine entry
// path.
func (x *Index[T]) Keep(id, path string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := x.kept[id]
	k.path = path
	x.kept[id] = k
}

// KeepName reserves family (Family of the kept object's name, as its bundle or entry
// tells it) for the kept object id, until Unkeep: Reserve refuses every name of it.
func (x *Index[T]) KeepName(id, family string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if k, ok := x.kept[id]; ok && family != "" {
		k.family = family
		x.kept[id] = k
	}
}

// Family is name without its attempt, the "_<n>" that ends every name an Index is given
// (a pod's name_namespace_uid_attempt, a container's name_<its pod's name>_attempt): one
// pod's sandboxes, or one container's attempts in one pod. A name without one is its own.
func Family(name string) string {
	i := strings.LastIndexByte(name, '_')
	if i < 0 {
		return name
	}
	if _, err := strconv.ParseUint(name[i+1:], 10, 32); err != nil {
		return name
	}
	return name[:i]
}

// Unkeep drops id from the kept ones (stopped as an operator asked), and frees its name.
func (x *Index[T]) Unkeep(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.kept, id)
}

// Kept says whether id is kept without a usable record.
func (x *Index[T]) Kept(id string) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	_, ok := x.kept[id]
	return ok
}

// KeptIDs is the IDs kept without a usable record.
func (x *Index[T]) KeptIDs() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, len(x.kept))
	for id := range x.kept {
		out = append(out, id)
	}
	return out
}
