// Package cgcontrollers knows which cgroup controllers a node has, and trims from an OCI
// resources block the limits of controllers it lacks. runc refuses a limit for a controller
// it cannot find ("cannot set hugetlb limit"); kubelet sends hugepage limits (of 0) for every
// page size the node has even where the hugetlb controller is not mounted, and containerd and
// CRI-O leave such limits out, so a pod runs as it would there.
package cgcontrollers

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/cgroups/cgpath"
)

// Root is where the cgroup filesystems are mounted.
const Root = "/sys/fs/cgroup"

// Node reads the controllers of one node. The zero value is not usable; see New.
type Node struct {
	root string
	v2   bool

	v1once sync.Once
	v1     map[string]bool
	procs  string // /proc/cgroups
	logged sync.Map
}

// New reads the cgroup layout under root (normally Root): the unified hierarchy (v2) when
// root itself holds cgroup.controllers, else v1 (hybrid included).
func New(root string) *Node {
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return &Node{root: root, v2: err == nil, procs: "/proc/cgroups"}
}

// V2 tells whether the node runs the unified hierarchy (cgroup v2 only).
func (n *Node) V2() bool { return n.v2 }

var (
	defaultOnce sync.Once
	defaultNode *Node
)

// Default is the node this process runs on.
func Default() *Node {
	defaultOnce.Do(func() { defaultNode = New(Root) })
	return defaultNode
}

// Available is the set of controllers a cgroup placed at cgroupsPath (an OCI
// linux.cgroupsPath) can use. On cgroup v1, those attached to a hierarchy (/proc/cgroups,
// hierarchy not 0), read once. On cgroup v2, those listed in cgroup.controllers of the
// nearest existing ancestor of the path: what the runtime can enable in its
// cgroup.subtree_control on the way down.
func (n *Node) Available(cgroupsPath string) map[string]bool {
	if !n.v2 {
		n.v1once.Do(func() { n.v1 = readProcCgroups(n.procs) })
		return n.v1
	}
	dir := n.root
	if rel, err := cgpath.Dir(cgroupsPath); err == nil { // either driver's form
		for d := filepath.Join(n.root, filepath.Dir(rel)); strings.HasPrefix(d, n.root); d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "cgroup.controllers")); err == nil {
				dir = d
				break
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil
	}
	set := map[string]bool{}
	for _, c := range strings.Fields(string(b)) {
		set[c] = true
	}
	return set
}

func readProcCgroups(path string) map[string]bool {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	set := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// #subsys_name hierarchy num_cgroups enabled
		fs := strings.Fields(sc.Text())
		if len(fs) == 4 && !strings.HasPrefix(fs[0], "#") && fs[1] != "0" && fs[3] == "1" {
			set[fs[0]] = true
		}
	}
	return set
}

// Trim removes from res the limits of controllers a cgroup at cgroupsPath cannot use and
// returns the controllers it left out; each is logged once per daemon at debug level.
// Device rules stay: on cgroup v2 they are an eBPF program, not a controller.
func (n *Node) Trim(res *specs.LinuxResources, cgroupsPath string) []string {
	if res == nil {
		return nil
	}
	have := n.Available(cgroupsPath)
	if have == nil {
		return nil // unreadable: leave the runtime to decide
	}
	var out []string
	drop := func(ctrl string) bool {
		if have[ctrl] {
			return false
		}
		if !slices.Contains(out, ctrl) {
			out = append(out, ctrl)
		}
		if _, seen := n.logged.LoadOrStore(ctrl, true); !seen {
			logrus.WithField("controller", ctrl).Debug("cgroup controller not available on this node; its limits are left out")
		}
		return true
	}
	if c := res.CPU; c != nil {
		if (c.Shares != nil || c.Quota != nil || c.Period != nil || c.Burst != nil || c.Idle != nil ||
			c.RealtimeRuntime != nil || c.RealtimePeriod != nil) && drop("cpu") {
			c.Shares, c.Quota, c.Period, c.Burst, c.Idle, c.RealtimeRuntime, c.RealtimePeriod = nil, nil, nil, nil, nil, nil, nil
		}
		if (c.Cpus != "" || c.Mems != "") && drop("cpuset") {
			c.Cpus, c.Mems = "", ""
		}
		if *c == (specs.LinuxCPU{}) {
			res.CPU = nil
		}
	}
	if res.Memory != nil && drop("memory") {
		res.Memory = nil
	}
	if res.Pids != nil && drop("pids") {
		res.Pids = nil
	}
	if len(res.HugepageLimits) > 0 && drop("hugetlb") {
		res.HugepageLimits = nil
	}
	if res.BlockIO != nil {
		ctrl := "blkio"
		if n.v2 {
			ctrl = "io"
		}
		if drop(ctrl) {
			res.BlockIO = nil
		}
	}
	if res.Rdma != nil && drop("rdma") {
		res.Rdma = nil
	}
	if res.Network != nil {
		if res.Network.ClassID != nil && drop("net_cls") {
			res.Network.ClassID = nil
		}
		if len(res.Network.Priorities) > 0 && drop("net_prio") {
			res.Network.Priorities = nil
		}
		if res.Network.ClassID == nil && len(res.Network.Priorities) == 0 {
			res.Network = nil
		}
	}
	if n.v2 {
		for k := range res.Unified {
			// memory.high belongs to memory; cgroup.* files are the core's, always there.
			if ctrl, _, ok := strings.Cut(k, "."); ok && ctrl != "cgroup" && drop(ctrl) {
				delete(res.Unified, k)
			}
		}
	}
	return out
}
