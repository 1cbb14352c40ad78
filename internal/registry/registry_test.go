package registry

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

type obj struct {
	id, name, pod string
	op            sync.Mutex
}

func (o *obj) RegistryKey() Key    { return Key{ID: o.id, Name: o.name, Pod: o.pod} }
func (o *obj) OpLock() sync.Locker { return &o.op }

func ids(os []*obj) []string {
	out := make([]string, 0, len(os))
	for _, o := range os {
		out = append(out, o.id)
	}
	slices.Sort(out)
	return out
}

func TestGet(t *testing.T) {
	x := New[*obj]("container_id", "container")
	x.Add(&obj{id: "abc123", name: "a"})
	x.Add(&obj{id: "abd456", name: "b"})
	if v, err := x.Get("abc123"); err != nil || v.id != "abc123" {
		t.Errorf("full id: %v %v", v, err)
	}
	if v, err := x.Get("abd"); err != nil || v.id != "abd456" {
		t.Errorf("unique prefix: %v %v", v, err)
	}
	if _, err := x.Get("ab"); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `container_id "ab" is ambiguous`) {
		t.Errorf("ambiguous: %v", err)
	}
	if _, err := x.Get("zz"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `container "zz"`) {
		t.Errorf("missing: %v", err)
	}
	p := New[*obj]("pod_sandbox_id", "pod sandbox")
	if _, err := p.Get(""); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "pod_sandbox_id is empty") {
		t.Errorf("empty: %v", err)
	}
}

// A name is taken from Reserve to Remove: a create that failed before listing its object
// frees it by the release it deferred; one that listed it keeps it past that release.
func TestNames(t *testing.T) {
	x := New[*obj]("pod_sandbox_id", "pod sandbox")
	id, release, err := x.Reserve("web")
	if err != nil || len(id) != 64 {
		t.Fatalf("Reserve: %q %v", id, err)
	}
	if _, _, err := x.Reserve("web"); !errors.Is(err, errdefs.ErrAlreadyExists) || !strings.Contains(err.Error(), `pod sandbox name "web" is already used by pod sandbox `+id) {
		t.Errorf("second Reserve: %v", err)
	}
	o := &obj{id: id, name: "web"}
	x.Add(o)
	release()
	if _, _, err := x.Reserve("web"); err == nil {
		t.Error("the release of a listed object's create freed its name")
	}
	x.Remove(o)
	again, release, err := x.Reserve("web")
	if err != nil || again == id {
		t.Errorf("Reserve after Remove: %q %v", again, err)
	}
	release()
	if _, _, err := x.Reserve("web"); err != nil {
		t.Errorf("Reserve after a failed create's release: %v", err)
	}
}

func TestPodIndex(t *testing.T) {
	x := New[*obj]("container_id", "container")
	a, b, c := &obj{id: "a1", name: "a", pod: "p1"}, &obj{id: "b1", name: "b", pod: "p1"}, &obj{id: "c1", name: "c", pod: "p2"}
	for _, o := range []*obj{a, b, c} {
		x.Add(o)
	}
	if got := ids(x.OfPod("p1")); !slices.Equal(got, []string{"a1", "b1"}) {
		t.Errorf("OfPod(p1) = %v", got)
	}
	if got := ids(x.Pick("", "p")); !slices.Equal(got, []string{"a1", "b1", "c1"}) {
		t.Errorf("Pick by pod prefix = %v", got)
	}
	if got := ids(x.Pick("b", "p1")); !slices.Equal(got, []string{"b1"}) {
		t.Errorf("Pick by ID and pod = %v", got)
	}
	x.Remove(a)
	x.Remove(b)
	if got := x.OfPod("p1"); got != nil {
		t.Errorf("OfPod of an emptied pod = %v", got)
	}
	if x.Len() != 1 || x.Listed("a1") || !x.Listed("c1") {
		t.Errorf("after removals: len %d", x.Len())
	}
}

// Hold waits for the object's lifecycle lock and then finds it gone when the holder
// removed it: a second removal is a no-op, not an error.
func TestHold(t *testing.T) {
	x := New[*obj]("container_id", "container")
	o := &obj{id: "a1", name: "a"}
	x.Add(o)
	v, unlock, ok, err := x.Hold("a")
	if !ok || err != nil || v != o {
		t.Fatalf("Hold: %v %v %v", v, ok, err)
	}
	done := make(chan bool)
	go func() {
		_, _, ok, err := x.Hold("a1")
		done <- ok || err != nil
	}()
	select {
	case <-done:
		t.Fatal("a second Hold did not wait for the first")
	case <-time.After(50 * time.Millisecond):
	}
	x.Remove(o)
	unlock()
	if held := <-done; held {
		t.Error("Hold of an object removed while it waited: held, or an error")
	}
	if _, _, ok, err := x.Hold("zz"); ok || err != nil {
		t.Errorf("Hold of an unknown ID: %v %v", ok, err)
	}
	if _, _, ok, err := x.Hold(""); ok || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Hold of an empty ID: %v %v", ok, err)
	}
}

// A kept object's name is reserved for every attempt (audit R7): kubelet, which cannot
// see it, makes the pod or container again under attempt 0 or the next, and the copy
// would run beside it. The refusal names the kept ID and what an operator does.
func TestKept(t *testing.T) {
	x := New[*obj]("pod_sandbox_id", "pod sandbox")
	x.Keep("k1", "/q/k1")
	if !x.Kept("k1") || x.Kept("k2") || !slices.Equal(x.KeptIDs(), []string{"k1"}) {
		t.Errorf("kept: %v", x.KeptIDs())
	}
	x.KeepName("k1", Family("web_default_uid-1_1"))
	x.KeepName("k2", "db_default_uid-2") // not kept: nothing reserved
	for _, name := range []string{"web_default_uid-1_0", "web_default_uid-1_1", "web_default_uid-1_7"} {
		_, _, err := x.Reserve(name)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "pod sandbox k1") || !strings.Contains(err.Error(), "rtshimd quarantine stop k1") {
			t.Errorf("Reserve(%q) beside the kept pod: %v", name, err)
		}
	}
	for _, name := range []string{"web_default_uid-2_0", "db_default_uid-2_0", "web_other_uid-1_0"} {
		if _, release, err := x.Reserve(name); err != nil {
			t.Errorf("Reserve(%q): %v", name, err)
		} else {
			release()
		}
	}
	x.Unkeep("k1")
	if x.Kept("k1") || len(x.KeptIDs()) != 0 {
		t.Error("Unkeep left it kept")
	}
	if _, _, err := x.Reserve("web_default_uid-1_0"); err != nil {
		t.Errorf("Reserve after the kept pod's stop: %v", err)
	}
}

func TestFamily(t *testing.T) {
	for name, want := range map[string]string{
		"web_default_uid_0":        "web_default_uid",
		"app_web_default_uid_0_12": "app_web_default_uid_0",
		"web":                      "web",
		"a_b_c_x":                  "a_b_c_x",
		"a_":                       "a_",
	} {
		if got := Family(name); got != want {
			t.Errorf("Family(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestExit(t *testing.T) {
	e := NewExit()
	select {
	case <-e.Done():
		t.Fatal("a new exit is done")
	default:
	}
	e.Mark()
	e.Mark() // the monitor and a removal may both learn the end
	select {
	case <-e.Done():
	default:
		t.Fatal("a marked exit is not done")
	}
}
