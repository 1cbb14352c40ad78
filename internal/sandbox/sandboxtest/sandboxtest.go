// Package sandboxtest holds the fakes a sandbox manager needs in the lifecycle unit tests:
// a sandbox.Node whose namespaces are "pinned" and pod tmpfs "mounted" as marks on plain
// files and directories, so the managers run without root and a test checks that nothing
// is left pinned or mounted; and a handler table of one row on a fake runtime.
package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/kind"
	"github.com/rtshimd/rtshimd/internal/nsfile"
	"github.com/rtshimd/rtshimd/internal/oci"
	"github.com/rtshimd/rtshimd/internal/store"
)

// ErrInjected is what a failure set with FailNext wraps.
var ErrInjected = errors.New("sandboxtest: injected failure")

// Node is the fake; its zero value is not usable: use NewNode.
type Node struct {
	// HomeDir, when set, is the fake pin home: pods' tmpfs are "mounted" there
	// (TmpfsInHome), as "home <id>", and lent to the node as a mark on the lend path.
	HomeDir string

	mu      sync.Mutex
	pinned  map[string]bool
	mounted map[string]bool
	fail    map[string]int
}

// NewNode returns a node with nothing pinned or mounted.
func NewNode() *Node {
	return &Node{pinned: map[string]bool{}, mounted: map[string]bool{}, fail: map[string]int{}}
}

// FailNext makes the next n calls of op fail ("pin", "unpin", "tmpfs", "unmount", "home
// tmpfs", "lend", "home unmount").
func (n *Node) FailNext(op string, count int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail[op] += count
}

func (n *Node) failing(op, path string) error {
	if n.fail[op] > 0 {
		n.fail[op]--
		return fmt.Errorf("sandboxtest: %s %s: %w", op, path, ErrInjected)
	}
	return nil
}

// Left is every path still pinned or mounted, sorted: what a removed pod must not leave.
func (n *Node) Left() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for p := range n.pinned {
		out = append(out, "pinned "+p)
	}
	for p := range n.mounted {
		out = append(out, "mounted "+p)
	}
	sort.Strings(out)
	return out
}

// Drop forgets a pin, as a namespace lost while the daemon was down (its holder gone).
func (n *Node) Drop(path string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.pinned, path)
}

func (n *Node) PinNamespaces(_, dir string, kinds []nsfile.Kind, _ string, _ *nsfile.UserNS) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("pin", dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, k := range kinds {
		p := filepath.Join(dir, string(k))
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			return err
		}
		n.pinned[p] = true
	}
	return nil
}

func (n *Node) Unpin(path string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("unpin", path); err != nil {
		return err
	}
	delete(n.pinned, path)
	return nil
}

func (n *Node) IsPinned(path string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pinned[path]
}

func (n *Node) MountPodTmpfs(path string, _ *oci.IDMappings) error {
	if err := n.mount("tmpfs", path); err != nil {
		return err
	}
	return podTmpfsDirs(path)
}

// podTmpfsDirs makes the pod tmpfs's shm and files directories at root.
func podTmpfsDirs(root string) error {
	for _, d := range []string{"shm", "files"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) TmpfsInHome() bool { return n.HomeDir != "" }

func (n *Node) MountPodTmpfsInHome(id string, _ *oci.IDMappings) (string, error) {
	root := filepath.Join(n.HomeDir, id, "tmpfs")
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("home tmpfs", id); err != nil {
		return "", err
	}
	if err := podTmpfsDirs(root); err != nil {
		return "", err
	}
	n.mounted["home "+id] = true
	return root, nil
}

func (n *Node) LendPodTmpfs(id, path string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("lend", path); err != nil {
		return err
	}
	if !n.mounted["home "+id] {
		return fmt.Errorf("sandboxtest: lend %s: no tmpfs of pod %s in the home", path, id)
	}
	n.mounted[path] = true
	return nil
}

func (n *Node) UnmountPodTmpfsInHome(id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("home unmount", id); err != nil {
		return err
	}
	delete(n.mounted, "home "+id)
	return os.RemoveAll(filepath.Join(n.HomeDir, id))
}

// IsLent is Lent.
func (n *Node) IsLent(path string) bool { return n.Lent(path) }

// Lent reports whether a copy of a pod's tmpfs is lent at path.
func (n *Node) Lent(path string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mounted[path]
}

func (n *Node) mount(op, path string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing(op, path); err != nil {
		return err
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return err
	}
	n.mounted[path] = true
	return nil
}

func (n *Node) Unmount(path string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failing("unmount", path); err != nil {
		return err
	}
	delete(n.mounted, path)
	return nil
}

// Handlers is a handler table of one ready row, "fake", on the runtime rt (what
// sandbox.Options.Handlers takes): every host feature on, as after discovery.
type Handlers struct{ H *handlers.Handler }

// NewHandlers returns the table; root is the row's runtime root.
func NewHandlers(rt kind.Runtime, root string) Handlers {
	row := &kind.Row{Handler: "fake", Path: "/bin/false", Root: root}
	return Handlers{H: &handlers.Handler{Name: "fake", Config: config.Handler{RuntimeType: rt.Type()}, Kind: rt, Runtime: row,
		Discovery: handlers.Discovery{Ready: true, Features: handlers.Features{HostNetwork: true, HostPID: true, HostIPC: true}}}}
}

func (f Handlers) Lookup(name string) (*handlers.Handler, error) {
	if name != "" && name != f.H.Name {
		return nil, fmt.Errorf("no runtime handler %q: %w", name, errdefs.ErrNotFound)
	}
	return f.H, nil
}

// StopUnrecorded and FindUnrecorded are the table's, on its one row.
func (f Handlers) StopUnrecorded(ctx context.Context, t kind.Task) ([]string, error) {
	return handlers.NewTable([]*handlers.Handler{f.H}, f.H.Name).StopUnrecorded(ctx, t)
}

func (f Handlers) FindUnrecorded(ctx context.Context, t kind.Task) ([]string, error) {
	return handlers.NewTable([]*handlers.Handler{f.H}, f.H.Name).FindUnrecorded(ctx, t)
}

// Plans are the two shapes of pod a kind asks for: the runc family's (the daemon pins
// the namespaces, no sandbox container) and a sandboxing runtime's (runsc, a shim: a
// sandbox container holds the pod).
var Plans = map[string]kind.PodPlan{
	"namespaces": {PinIPCUTS: true, HostNamespaces: true, DetachRootfs: true, MountsToNode: true},
	"sandboxed":  {SandboxContainer: true, PodLimits: true, DeleteSandboxAtStop: true},
}

// PodConfig is a pod as kubelet sends it: a PID namespace per container.
func PodConfig(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		Hostname: name,
		Labels:   map[string]string{"app": name},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

// Await waits for cond, which the managers' watchers make true in their own time.
func Await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

// CheckLeft fails unless rt (kindtest's runtime) holds no task, n has nothing pinned or
// mounted, and st no record: what a test checks once its last pod is removed.
func CheckLeft(t *testing.T, rt interface{ Tasks() []string }, n *Node, st ...*store.Store) {
	t.Helper()
	if tasks := rt.Tasks(); len(tasks) > 0 {
		t.Errorf("runtime still holds %v", tasks)
	}
	if left := n.Left(); len(left) > 0 {
		t.Errorf("node still has %v", left)
	}
	for _, s := range st {
		if ids := Records(t, s); len(ids) > 0 {
			t.Errorf("records left: %v", ids)
		}
	}
}

// Records is the IDs of the records in st.
func Records(t *testing.T, st *store.Store) []string {
	t.Helper()
	recs, err := st.Load()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	return ids
}
