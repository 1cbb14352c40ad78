// Package criuimg reads what a CRIU image would give the processes it restores — their
// credentials, capability sets, seccomp mode, resource limits and user namespace — and
// checks it against the OCI spec of the container they are restored into. CRIU restores
// these from the image as root, whatever the spec says (runc's restore applies none of the
// spec's process settings), so a checkpoint is untrusted input: a crafted one would give
// an unprivileged pod a full-capability root process in the node's user namespace.
//
// The images are decoded by go-criu's crit, the CRIU project's own Go library; only the
// framing of each file is checked here first, so that a size field cannot make crit
// allocate more than the file holds.
package criuimg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pstree"
	"github.com/checkpoint-restore/go-criu/v7/magic"
	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// maxImageFile bounds each image file decoded here (pstree.img, core-*.img): a few KiB
// each in practice.
const maxImageFile = 4 << 20

// maxTasks bounds the threads a checkpoint may restore (CRIU has no bound of its own), and
// maxDecoded what is decoded of all of them together: decoded images take about twice
// their size in memory, in a daemon the OOM killer spares.
const (
	maxTasks   = 4096
	maxDecoded = 64 << 20
)

// Refusal is a restore refused for what the image asks for: Task (a thread ID in the
// image) would get Asked, which the new container's spec does not grant.
type Refusal struct {
	Task  uint32
	Asked string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("task %d of the checkpoint asks for %s", r.Task, r.Asked)
}

// Task is one thread's restored state, as the image records it.
type Task struct {
	ID                 uint32
	UIDs, GIDs         [4]uint32 // real, effective, saved, fs
	Groups             []uint32
	Inh, Prm, Eff, Bnd uint64
	Seccomp            criucore.SeccompMode
	UserNS             uint32
	Rlimits            map[int]uint64 // resource → hard limit, where recorded
	LSMProfile         string
	SchedPolicy        uint32 // SCHED_* (0: SCHED_OTHER)
	OOMScoreAdj        *int32 // where recorded (a task's leader)
}

// Read decodes the tasks of the CRIU image in dir: every thread pstree.img lists, from its
// core-<tid>.img. A thread without one, or one in CRIU's older creds-*.img format, is an
// error: what CRIU would restore must be what is checked.
func Read(dir string) (tasks []Task, err error) {
	defer func() {
		// crit picks its decoder by the file's magic, checked first; whatever else it
		// cannot decode is this checkpoint's error, not the daemon's.
		if r := recover(); r != nil {
			tasks, err = nil, fmt.Errorf("CRIU image: undecodable: %v", r)
		}
	}()
	budget := int64(maxDecoded)
	if m, _ := filepath.Glob(filepath.Join(dir, "creds-*.img")); len(m) > 0 {
		return nil, fmt.Errorf("%s: credentials in CRIU's pre-3.0 format, which is not read here", filepath.Base(m[0]))
	}
	var tree pstree.PstreeEntry
	img, err := decode(filepath.Join(dir, "pstree.img"), "PSTREE", &tree, &budget)
	if err != nil {
		return nil, err
	}
	for _, e := range img.Entries {
		pe := e.Message.(*pstree.PstreeEntry)
		threads := pe.GetThreads()
		if len(threads) == 0 {
			threads = []uint32{pe.GetPid()}
		}
		for _, tid := range threads {
			if len(tasks) >= maxTasks {
				return nil, fmt.Errorf("pstree.img: more than %d threads", maxTasks)
			}
			t, err := readCore(dir, tid, &budget)
			if err != nil {
				return nil, err
			}
			tasks = append(tasks, t)
		}
	}
	if len(tasks) == 0 {
		return nil, errors.New("pstree.img lists no task")
	}
	return tasks, nil
}

func readCore(dir string, tid uint32, budget *int64) (Task, error) {
	name := fmt.Sprintf("core-%d.img", tid)
	var ce criucore.CoreEntry
	img, err := decode(filepath.Join(dir, name), "CORE", &ce, budget)
	if err != nil {
		return Task{}, err
	}
	if len(img.Entries) != 1 {
		return Task{}, fmt.Errorf("%s: %d entries, want 1", name, len(img.Entries))
	}
	core := img.Entries[0].Message.(*criucore.CoreEntry)
	tc := core.GetThreadCore()
	cr := tc.GetCreds()
	if cr == nil {
		return Task{}, fmt.Errorf("%s: no credentials recorded", name)
	}
	t := Task{
		ID:     tid,
		UIDs:   [4]uint32{cr.GetUid(), cr.GetEuid(), cr.GetSuid(), cr.GetFsuid()},
		GIDs:   [4]uint32{cr.GetGid(), cr.GetEgid(), cr.GetSgid(), cr.GetFsgid()},
		Groups: cr.GetGroups(),
		Inh:    capMask(cr.GetCapInh()), Prm: capMask(cr.GetCapPrm()),
		Eff: capMask(cr.GetCapEff()), Bnd: capMask(cr.GetCapBnd()),
		Seccomp:     tc.GetSeccompMode(),
		UserNS:      core.GetIds().GetUserNsId(),
		LSMProfile:  cr.GetLsmProfile(),
		SchedPolicy: tc.GetSchedPolicy(),
	}
	if tc := core.GetTc(); tc != nil {
		// Images of older CRIU record the mode per task only.
		if t.Seccomp == criucore.SeccompMode_disabled && tc.OldSeccompMode != nil {
			t.Seccomp = tc.GetOldSeccompMode()
		}
		if tc.OomScoreAdj != nil {
			v := tc.GetOomScoreAdj()
			t.OOMScoreAdj = &v
		}
		if rl := tc.GetRlimits(); rl != nil {
			t.Rlimits = map[int]uint64{}
			for i, r := range rl.GetRlimits() {
				t.Rlimits[i] = r.GetMax()
			}
		}
	}
	return t, nil
}

// decode reads the image file at path, a regular file of at most maxImageFile bytes (and of
// what is left of budget) opened without following a link, after checking that it is the
// image magic names and that every entry's size fits in it.
func decode(path, magicName string, entry proto.Message, budget *int64) (*crit.CriuImage, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("CRIU image: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	name := filepath.Base(path)
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("CRIU image: %s is not a regular file", name)
	}
	if fi.Size() > maxImageFile {
		return nil, fmt.Errorf("CRIU image: %s is %d bytes, more than %d", name, fi.Size(), maxImageFile)
	}
	if *budget -= fi.Size(); *budget < 0 {
		return nil, fmt.Errorf("CRIU image: its core images hold more than %d bytes", maxDecoded)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxImageFile+1))
	if err != nil {
		return nil, err
	}
	if err := framesFit(b); err != nil {
		return nil, fmt.Errorf("CRIU image: %s: %w", name, err)
	}
	if got := imageMagic(b); got != magics.ByName[magicName] {
		return nil, fmt.Errorf("CRIU image: %s is not a %s image (magic %#x)", name, magicName, got)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	img, err := crit.New(f, nil, "", false, false).Decode(entry)
	if err != nil {
		return nil, fmt.Errorf("CRIU image: %s: %w", name, err)
	}
	return img, nil
}

// CRIU's image framing (criu/include/magic.h): a magic, preceded by IMG_COMMON's or
// IMG_SERVICE's for most images, then entries, each a little-endian 32-bit size and that
// many bytes of protobuf.
const (
	imgCommonMagic  = 0x54564319
	imgServiceMagic = 0x55105940
)

var magics = magic.LoadMagic()

// imageMagic is the image's own magic, after IMG_COMMON's or IMG_SERVICE's.
func imageMagic(b []byte) uint64 {
	m := binary.LittleEndian.Uint32(b)
	if (m == imgCommonMagic || m == imgServiceMagic) && len(b) >= 8 {
		m = binary.LittleEndian.Uint32(b[4:])
	}
	return uint64(m)
}

func framesFit(b []byte) error {
	if len(b) < 4 {
		return errors.New("no magic")
	}
	off := 4
	if m := binary.LittleEndian.Uint32(b); m == imgCommonMagic || m == imgServiceMagic {
		if len(b) < 8 {
			return errors.New("no magic")
		}
		off = 8
	}
	for off < len(b) {
		if len(b)-off < 4 {
			return fmt.Errorf("a truncated entry at byte %d", off)
		}
		n := int(binary.LittleEndian.Uint32(b[off:]))
		off += 4
		if n > len(b)-off {
			return fmt.Errorf("an entry of %d bytes at byte %d, past the file's end", n, off-4)
		}
		off += n
	}
	return nil
}

func capMask(words []uint32) uint64 {
	var m uint64
	for i, w := range words {
		if i < 2 {
			m |= uint64(w) << (32 * i)
		}
	}
	return m
}

// capBits maps a capability's OCI name (CAP_SYS_ADMIN) to its number.
var capBits = func() map[string]uint {
	m := map[string]uint{}
	for _, c := range capability.ListKnown() {
		m["CAP_"+strings.ToUpper(c.String())] = uint(c)
	}
	return m
}()

func specMask(names []string) uint64 {
	var m uint64
	for _, n := range names {
		if b, ok := capBits[n]; ok && b < 64 {
			m |= 1 << b
		}
	}
	return m
}

func capNames(m uint64) string {
	var out []string
	for n, b := range capBits {
		if b < 64 && m&(1<<b) != 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		// A bit no capability of this build's list names.
		return fmt.Sprintf("%#x", m)
	}
	return strings.Join(out, ", ")
}

// rlimitNumbers maps the spec's rlimit names to the kernel's resource numbers, which
// index a task's recorded limits.
var rlimitNumbers = map[string]int{
	"RLIMIT_CPU": unix.RLIMIT_CPU, "RLIMIT_FSIZE": unix.RLIMIT_FSIZE, "RLIMIT_DATA": unix.RLIMIT_DATA,
	"RLIMIT_STACK": unix.RLIMIT_STACK, "RLIMIT_CORE": unix.RLIMIT_CORE, "RLIMIT_RSS": unix.RLIMIT_RSS,
	"RLIMIT_NPROC": unix.RLIMIT_NPROC, "RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK,
	"RLIMIT_AS": unix.RLIMIT_AS, "RLIMIT_LOCKS": 10, "RLIMIT_SIGPENDING": 11, "RLIMIT_MSGQUEUE": 12,
	"RLIMIT_NICE": 13, "RLIMIT_RTPRIO": 14, "RLIMIT_RTTIME": 15,
}

// Check refuses (a *Refusal) a restore whose tasks would hold more than spec grants the
// container's process:
//
//   - capabilities: a task's bounding set within the spec's; its permitted, effective
//     and inheritable sets within the spec's permitted set, or within its bounding set
//     where the spec lets a process gain privileges (no_new_privs unset: a setuid program
//     could take it that far);
//   - user and groups: the spec's user and groups, unless the spec's process is root with
//     CAP_SETUID (CAP_SETGID) in its bounding set, which may take any;
//   - seccomp: where the spec has a profile, every thread under a filter (or strict);
//   - resource limits: no hard limit above the spec's, unless CAP_SYS_RESOURCE is in
//     its bounding set;
//   - scheduling: no real-time policy (SCHED_FIFO, SCHED_RR, SCHED_DEADLINE) without
//     CAP_SYS_NICE in the bounding set, and no oom_score_adj below the spec's without
//     CAP_SYS_RESOURCE;
//   - one user namespace for every task: a nested one would hold capabilities of its own.
//
// What CRIU does not record cannot be checked here: no_new_privs (the caller looks at the
// restored processes) and the seccomp filters' content (a thread under any filter passes).
func Check(tasks []Task, spec *specs.Spec) error {
	p := spec.Process
	if p == nil {
		return errors.New("the spec has no process")
	}
	var bnd, prm uint64
	if c := p.Capabilities; c != nil {
		bnd, prm = specMask(c.Bounding), specMask(c.Permitted)
	}
	reach := prm
	if !p.NoNewPrivileges {
		reach = bnd
	}
	root := p.User.UID == 0
	anyUID := root && bnd&(1<<capability.CAP_SETUID) != 0
	anyGID := root && bnd&(1<<capability.CAP_SETGID) != 0
	gids := append([]uint32{p.User.GID}, p.User.AdditionalGids...)
	seccomp := spec.Linux != nil && spec.Linux.Seccomp != nil
	limits := map[int]uint64{}
	if bnd&(1<<capability.CAP_SYS_RESOURCE) == 0 {
		for _, r := range p.Rlimits {
			if n, ok := rlimitNumbers[r.Type]; ok {
				limits[n] = r.Hard
			}
		}
	}
	userNS := tasks[0].UserNS
	for _, t := range tasks {
		refuse := func(format string, a ...any) error {
			return &Refusal{Task: t.ID, Asked: fmt.Sprintf(format, a...)}
		}
		if extra := t.Bnd &^ bnd; extra != 0 {
			return refuse("capabilities the container's bounding set lacks: %s", capNames(extra))
		}
		for _, s := range []struct {
			name string
			m    uint64
		}{{"permitted", t.Prm}, {"effective", t.Eff}, {"inheritable", t.Inh}} {
			if extra := s.m &^ reach; extra != 0 {
				return refuse("%s capabilities the container cannot have: %s", s.name, capNames(extra))
			}
		}
		if !anyUID {
			for _, u := range t.UIDs {
				if u != p.User.UID {
					return refuse("user ID %d, where the container runs as %d", u, p.User.UID)
				}
			}
		}
		if !anyGID {
			for _, g := range append(t.GIDs[:], t.Groups...) {
				if !slices.Contains(gids, g) {
					return refuse("group ID %d, which the container's groups %v lack", g, gids)
				}
			}
		}
		if seccomp && t.Seccomp == criucore.SeccompMode_disabled {
			return refuse("no seccomp filter, where the container has a seccomp profile")
		}
		for n, hard := range limits {
			if got, ok := t.Rlimits[n]; ok && got > hard {
				return refuse("a hard limit of %d on resource %d, above the container's %d", got, n, hard)
			}
		}
		pol := t.SchedPolicy &^ unix.SCHED_RESET_ON_FORK
		if rt := pol == unix.SCHED_FIFO || pol == unix.SCHED_RR || pol == 6; rt && bnd&(1<<capability.CAP_SYS_NICE) == 0 {
			return refuse("real-time scheduling (policy %d), where the container lacks CAP_SYS_NICE", t.SchedPolicy)
		}
		if a := t.OOMScoreAdj; a != nil && bnd&(1<<capability.CAP_SYS_RESOURCE) == 0 {
			min := 0
			if p.OOMScoreAdj != nil {
				min = *p.OOMScoreAdj
			}
			if int(*a) < min {
				return refuse("oom_score_adj %d, below the container's %d", *a, min)
			}
		}
		if t.UserNS != userNS {
			return refuse("a user namespace of its own (nested user namespaces are not restored)")
		}
	}
	return nil
}
