// Package podcgroup sets the limits of a pod's cgroup (the PodSandboxConfig's
// cgroup_parent, which holds every container of the pod whatever the runtime): the pod's
// limits plus its handler's overhead. kubelet makes that cgroup and sets the same values
// when its RuntimeClass declares the overhead; rtshimd raises them by a handler's overhead
// kubelet does not know, and sets them for clients that are not kubelet.
// Only the cgroupfs driver: under systemd the pod's slice belongs to systemd.
package podcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Root is where the cgroup hierarchies are mounted.
const Root = "/sys/fs/cgroup"

// Exists reports whether the cgroup at path (relative to the hierarchy) is there: on
// v1, in the memory hierarchy.
func Exists(path string) bool {
	dir := filepath.Join(Root, path)
	if cgroups.Mode() != cgroups.Unified {
		dir = filepath.Join(Root, "memory", path)
	}
	_, err := os.Stat(dir)
	return err == nil
}

// Apply sets res on the cgroup at path, creating it where it is absent; created says
// whether it did (then Remove deletes it with the pod). On a cgroup that exists (kubelet's
// pod cgroup) limits are only ever raised: kubelet knows things the CRI does not say —
// a Burstable pod whose sidecar has no limit sends the sum of the limits there are, yet its
// pod cgroup must stay unlimited — so a limit tighter than the one set, or one where there
// is none, is left out. set is what was written (nil: nothing); effective is res as the
// cgroup now bounds it (a limit the cgroup does not have left out), for a cgroup beneath
// that should carry the pod's limits too (gVisor's sandbox).
func Apply(path string, res *specs.LinuxResources) (set, effective *specs.LinuxResources, created bool, err error) {
	created = !Exists(path)
	set, effective = res, res
	if !created {
		cur, err := current(path)
		if err != nil {
			return nil, nil, false, fmt.Errorf("pod cgroup %s: %w", path, err)
		}
		if set, effective = raiseOnly(cur, res); set == nil {
			return nil, effective, false, nil
		}
	}
	if cgroups.Mode() == cgroups.Unified {
		_, err = cgroup2.NewManager(Root, path, cgroup2.ToResources(set))
	} else if created {
		_, err = cgroup1.New(cgroup1.StaticPath(path), set)
	} else {
		var cg cgroup1.Cgroup
		if cg, err = cgroup1.Load(cgroup1.StaticPath(path)); err == nil {
			err = cg.Update(set)
		}
	}
	if err != nil {
		return nil, nil, created, fmt.Errorf("pod cgroup %s: %w", path, err)
	}
	return set, effective, created, nil
}

// Set writes res on the existing cgroup at path as it is, lowering limits too: for a pod
// cgroup rtshimd made (Apply created it), whose limits are the pod's and nobody else's.
// A limit res leaves out is left as it was.
func Set(path string, res *specs.LinuxResources) error {
	var err error
	if cgroups.Mode() == cgroups.Unified {
		var m *cgroup2.Manager
		if m, err = cgroup2.Load(path); err == nil {
			err = m.Update(cgroup2.ToResources(res))
		}
	} else {
		var cg cgroup1.Cgroup
		if cg, err = cgroup1.Load(cgroup1.StaticPath(path)); err == nil {
			err = cg.Update(res)
		}
	}
	if err != nil {
		return fmt.Errorf("pod cgroup %s: %w", path, err)
	}
	return nil
}

// limits are a cgroup's memory limit, CPU quota (-1: none) and CPU weight in shares.
type limits struct {
	memory, quota int64
	shares        uint64
}

// raiseOnly splits res against cur: set holds the limits that raise cur's (nil: none),
// effective those of res that cur has at all (nil: none).
func raiseOnly(cur limits, res *specs.LinuxResources) (set, effective *specs.LinuxResources) {
	set, effective = &specs.LinuxResources{}, &specs.LinuxResources{}
	setCPU, effCPU := &specs.LinuxCPU{}, &specs.LinuxCPU{}
	if m := res.Memory; m != nil && m.Limit != nil && cur.memory >= 0 {
		effective.Memory = &specs.LinuxMemory{Limit: m.Limit}
		if *m.Limit > cur.memory {
			set.Memory = effective.Memory
		}
	}
	if c := res.CPU; c != nil {
		if c.Quota != nil && cur.quota >= 0 {
			effCPU.Quota, effCPU.Period = c.Quota, c.Period
			if *c.Quota > cur.quota {
				setCPU.Quota, setCPU.Period = c.Quota, c.Period
			}
		}
		if c.Shares != nil {
			effCPU.Shares = c.Shares
			if *c.Shares > cur.shares {
				setCPU.Shares = c.Shares
			}
		}
	}
	nonEmpty := func(r *specs.LinuxResources, cpu *specs.LinuxCPU) *specs.LinuxResources {
		if cpu.Quota != nil || cpu.Shares != nil {
			r.CPU = cpu
		}
		if r.Memory == nil && r.CPU == nil {
			return nil
		}
		return r
	}
	return nonEmpty(set, setCPU), nonEmpty(effective, effCPU)
}

// current reads the limits set on the cgroup at path.
func current(path string) (limits, error) {
	read := func(parts ...string) (string, error) {
		b, err := os.ReadFile(filepath.Join(append([]string{Root}, parts...)...))
		return strings.TrimSpace(string(b)), err
	}
	num := func(s string) int64 {
		if s == "max" {
			return -1
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v >= 1<<62 { // v1 writes "no limit" as a page-rounded huge number
			return -1
		}
		return v
	}
	var l limits
	if cgroups.Mode() == cgroups.Unified {
		mem, err := read(path, "memory.max")
		if err != nil {
			return l, err
		}
		cpuMax, err := read(path, "cpu.max")
		if err != nil {
			return l, err
		}
		weight, err := read(path, "cpu.weight")
		if err != nil {
			return l, err
		}
		l.memory = num(mem)
		quota, _, _ := strings.Cut(cpuMax, " ")
		l.quota = num(quota)
		if w := num(weight); w > 0 {
			l.shares = sharesOfWeight(uint64(w))
		}
		return l, nil
	}
	mem, err := read("memory", path, "memory.limit_in_bytes")
	if err != nil {
		return l, err
	}
	quota, err := read("cpu", path, "cpu.cfs_quota_us")
	if err != nil {
		return l, err
	}
	shares, err := read("cpu", path, "cpu.shares")
	if err != nil {
		return l, err
	}
	l.memory, l.quota = num(mem), num(quota)
	if v := num(shares); v > 0 {
		l.shares = uint64(v)
	}
	return l, nil
}

// sharesOfWeight is cpu.weight back in shares: the fewest shares that the conversion kubelet
// and this package write a pod cgroup's weight with (opencontainers/cgroups', quadratic
// since v0.0.5, which containerd's cgroup2 copies) turns into weight w or more. The
// conversion loses precision, so raising "shares" that map to the same weight writes the
// weight already there; a linear inverse (runc 1.1's formula) read kubelet's 512 shares
// (weight 59) as 1522 and left an overhead unapplied.
func sharesOfWeight(w uint64) uint64 {
	lo, hi := uint64(2), uint64(262144)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if cgroup2.ConvertCPUSharesToCgroupV2Value(mid) >= w {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// Remove deletes the cgroup at path (Apply created it, or a runtime whose create was cut
// short left it); one already gone is no error, one that still holds a process is.
func Remove(path string) error {
	var err error
	if cgroups.Mode() == cgroups.Unified {
		var m *cgroup2.Manager
		if m, err = cgroup2.Load(path); err == nil {
			err = m.Delete()
		}
	} else {
		var cg cgroup1.Cgroup
		if cg, err = cgroup1.Load(cgroup1.StaticPath(path)); err == nil {
			err = cg.Delete()
		}
		if errors.Is(err, cgroup1.ErrCgroupDeleted) {
			err = nil
		}
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", path, err)
	}
	return nil
}

// RemoveLeft removes the cgroup of task id, given as its spec's cgroupsPath, once its
// runtime deleted the task: a create cut short (the runc shim abandons one whose caller
// died) leaves the cgroup and no runtime state to remove it by. Only a cgroup named for the
// task is touched (an NRI plugin may have put the task in a cgroup others share), in every
// hierarchy mounted (on a hybrid host runc makes one in the unified hierarchy too, which
// containerd's cgroup1 does not know), children first; rmdir refuses one that still holds
// a process. Nothing under the systemd driver ("slice:prefix:name"): the scope goes with
// its processes.
func RemoveLeft(cgroupsPath, id string) error {
	if !strings.HasPrefix(cgroupsPath, "/") || filepath.Base(cgroupsPath) != id {
		return nil
	}
	var errs []error
	for _, root := range hierarchies() {
		if err := removeTree(filepath.Join(root, cgroupsPath), true); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", cgroupsPath, err)
	}
	return nil
}

// RemoveChildren removes the cgroups below the one at cgroupsPath (a spec's cgroupsPath
// under the cgroupfs driver), deepest first, in every hierarchy mounted, and keeps that
// one. For a sandbox runtime that makes each of the pod's containers a cgroup below its own
// and removes its own when it is deleted (runsc on cgroup v2): rmdir of a cgroup that has
// children fails with EBUSY, so once the sandbox's processes are gone its children go
// first. rmdir refuses a cgroup that still holds a process, and that is returned.
func RemoveChildren(cgroupsPath string) error {
	if !strings.HasPrefix(cgroupsPath, "/") || filepath.Clean(cgroupsPath) == "/" {
		return nil
	}
	var errs []error
	for _, root := range hierarchies() {
		if err := removeTree(filepath.Join(root, cgroupsPath), false); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the cgroups below %s: %w", cgroupsPath, err)
	}
	return nil
}

// Holders says what keeps the cgroup at cgroupsPath from being removed, for an error that
// names it: the processes in it (PID and name; a zombie counts until it is reaped) and its
// child cgroups, in the first hierarchy that has it; "" when it is gone or empty.
func Holders(cgroupsPath string) string {
	if !strings.HasPrefix(cgroupsPath, "/") {
		return ""
	}
	for _, root := range hierarchies() {
		dir := filepath.Join(root, cgroupsPath)
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		var parts []string
		var procs []string
		for _, pid := range strings.Fields(string(b)) {
			comm, _ := os.ReadFile(filepath.Join("/proc", pid, "comm"))
			state := ""
			if st, err := os.ReadFile(filepath.Join("/proc", pid, "stat")); err == nil {
				if i := strings.LastIndexByte(string(st), ')'); i > 0 && len(st) > i+2 {
					state = " " + string(st[i+2])
				}
			}
			procs = append(procs, pid+" "+strings.TrimSpace(string(comm))+state)
		}
		if len(procs) > 0 {
			parts = append(parts, "processes "+strings.Join(procs, ", "))
		}
		var kids []string
		if ents, err := os.ReadDir(dir); err == nil {
			for _, e := range ents {
				if e.IsDir() {
					kids = append(kids, e.Name())
				}
			}
		}
		if len(kids) > 0 {
			parts = append(parts, "child cgroups "+strings.Join(kids, ", "))
		}
		if len(parts) == 0 {
			return ""
		}
		return fmt.Sprintf("cgroup %s holds %s", dir, strings.Join(parts, "; "))
	}
	return ""
}

// removeTree removes the cgroup directories below dir, deepest first, and dir itself with
// withRoot. A cgroup that still holds a process stays (and its ancestors with it); the
// first such refusal is returned, the other branches are removed all the same.
func removeTree(dir string, withRoot bool) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err == nil && de.IsDir() && (withRoot || p != dir) {
			dirs = append(dirs, p)
		}
		return nil
	})
	var first error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
}

// hierarchies are the roots of the cgroup hierarchies mounted: the one of a unified host,
// or each v1 controller's (and a hybrid host's unified one).
func hierarchies() []string {
	if cgroups.Mode() == cgroups.Unified {
		return []string{Root}
	}
	procs, _ := filepath.Glob(filepath.Join(Root, "*", "cgroup.procs"))
	var roots []string
	for _, p := range procs {
		roots = append(roots, filepath.Dir(p))
	}
	return roots
}
