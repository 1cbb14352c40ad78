package criuimg

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/creds"
	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"github.com/checkpoint-restore/go-criu/v7/crit/images/pstree"
	rlimitpb "github.com/checkpoint-restore/go-criu/v7/crit/images/rlimit"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
)

// writeImage encodes entries as CRIU's image file name in dir, as CRIU writes it.
func writeImage(t *testing.T, dir, name, magic string, entries ...proto.Message) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img := &crit.CriuImage{Magic: magic}
	for _, e := range entries {
		img.Entries = append(img.Entries, &crit.CriuEntry{Message: e})
	}
	if err := crit.New(nil, f, "", false, false).Encode(img); err != nil {
		t.Fatal(err)
	}
}

// task is one thread's core image: root's IDs and the given capability words.
type task struct {
	tid     uint32
	uid     uint32
	caps    uint64 // every set
	seccomp criucore.SeccompMode
	userNS  uint32
	nofile  uint64 // hard limit; 0: none recorded
	sched   uint32 // SCHED_* policy
	oomAdj  *int32
}

func writeCheckpoint(t *testing.T, tasks ...task) string {
	t.Helper()
	dir := t.TempDir()
	var threads []uint32
	for _, tk := range tasks {
		threads = append(threads, tk.tid)
		words := []uint32{uint32(tk.caps), uint32(tk.caps >> 32)}
		core := &criucore.CoreEntry{
			Mtype: criucore.CoreEntry_X86_64.Enum(),
			Ids:   &criucore.TaskKobjIdsEntry{VmId: proto.Uint32(1), FilesId: proto.Uint32(1), FsId: proto.Uint32(1), SighandId: proto.Uint32(1), UserNsId: proto.Uint32(tk.userNS)},
			ThreadCore: &criucore.ThreadCoreEntry{
				FutexRla: proto.Uint64(0), FutexRlaLen: proto.Uint32(0),
				Creds: &creds.CredsEntry{
					Uid: proto.Uint32(tk.uid), Gid: proto.Uint32(0), Euid: proto.Uint32(tk.uid), Egid: proto.Uint32(0),
					Suid: proto.Uint32(tk.uid), Sgid: proto.Uint32(0), Fsuid: proto.Uint32(tk.uid), Fsgid: proto.Uint32(0),
					CapInh: words, CapPrm: words, CapEff: words, CapBnd: words, Secbits: proto.Uint32(0),
				},
				SeccompMode: tk.seccomp.Enum(),
				SchedPolicy: proto.Uint32(tk.sched),
			},
		}
		if tk.oomAdj != nil {
			core.Tc = &criucore.TaskCoreEntry{TaskState: proto.Uint32(1), ExitCode: proto.Uint32(0), Personality: proto.Uint32(0),
				Flags: proto.Uint32(0), BlkSigset: proto.Uint64(0), Comm: proto.String("sh"), OomScoreAdj: tk.oomAdj}
		}
		if tk.nofile != 0 {
			var rl []*rlimitpb.RlimitEntry
			for i := 0; i < 16; i++ {
				rl = append(rl, &rlimitpb.RlimitEntry{Cur: proto.Uint64(1024), Max: proto.Uint64(1024)})
			}
			rl[7].Max = proto.Uint64(tk.nofile)
			core.Tc = &criucore.TaskCoreEntry{TaskState: proto.Uint32(1), ExitCode: proto.Uint32(0), Personality: proto.Uint32(0),
				Flags: proto.Uint32(0), BlkSigset: proto.Uint64(0), Comm: proto.String("sh"), Rlimits: &criucore.TaskRlimitsEntry{Rlimits: rl}}
		}
		writeImage(t, dir, "core-"+itoa(tk.tid)+".img", "CORE", core)
	}
	writeImage(t, dir, "pstree.img", "PSTREE", &pstree.PstreeEntry{Pid: proto.Uint32(tasks[0].tid), Ppid: proto.Uint32(0), Pgid: proto.Uint32(1), Sid: proto.Uint32(1), Threads: threads})
	return dir
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// The default set runc gives a container (Docker's), as bits.
var defaultCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}

func podSpec(uid uint32, caps []string, nnp, seccomp bool) *specs.Spec {
	s := &specs.Spec{Process: &specs.Process{
		User:            specs.User{UID: uid, GID: 0},
		Capabilities:    &specs.LinuxCapabilities{Bounding: caps, Permitted: caps, Effective: caps},
		NoNewPrivileges: nnp,
		Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024}},
	}, Linux: &specs.Linux{}}
	if seccomp {
		s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: specs.ActErrno}
	}
	return s
}

func TestCheck(t *testing.T) {
	dflt := specMask(defaultCaps)
	all := uint64(1)<<41 - 1 // CAP_CHOWN .. CAP_CHECKPOINT_RESTORE: a privileged container's
	filter := criucore.SeccompMode_filter
	for _, tc := range []struct {
		name  string
		tasks []task
		spec  *specs.Spec
		want  string // "" passes
	}{
		{"the pod's own", []task{{tid: 1, caps: dflt, seccomp: filter}}, podSpec(0, defaultCaps, false, true), ""},
		{"fewer capabilities", []task{{tid: 1, caps: 0, seccomp: filter}}, podSpec(0, defaultCaps, false, true), ""},
		{"a privileged checkpoint", []task{{tid: 1, caps: all, seccomp: filter}}, podSpec(0, defaultCaps, false, true), "CAP_SYS_ADMIN"},
		{"a second thread privileged", []task{{tid: 1, caps: dflt, seccomp: filter}, {tid: 2, caps: all, seccomp: filter}}, podSpec(0, defaultCaps, false, true), "task 2"},
		{"no seccomp", []task{{tid: 1, caps: dflt}}, podSpec(0, defaultCaps, false, true), "no seccomp filter"},
		{"no seccomp, unconfined pod", []task{{tid: 1, caps: dflt}}, podSpec(0, defaultCaps, false, false), ""},
		{"root into a non-root pod", []task{{tid: 1, uid: 0, caps: 0, seccomp: filter}}, podSpec(1000, defaultCaps, true, true), "user ID 0"},
		{"the non-root pod's user", []task{{tid: 1, uid: 1000, caps: 0, seccomp: filter}}, podSpec(1000, defaultCaps, true, true), ""},
		{"permitted beyond a no_new_privs pod's", []task{{tid: 1, uid: 1000, caps: specMask([]string{"CAP_NET_RAW"}), seccomp: filter}},
			podSpec(1000, []string{"CAP_CHOWN"}, true, true), "CAP_NET_RAW"},
		{"a nested user namespace", []task{{tid: 1, caps: dflt, seccomp: filter, userNS: 1}, {tid: 2, caps: dflt, seccomp: filter, userNS: 2}},
			podSpec(0, defaultCaps, false, true), "user namespace of its own"},
		{"a hard limit above the pod's", []task{{tid: 1, caps: dflt, seccomp: filter, nofile: 1 << 20}}, podSpec(0, defaultCaps, false, true), "hard limit of 1048576 on resource 7"},
		{"SCHED_FIFO", []task{{tid: 1, caps: dflt, seccomp: filter, sched: 1}}, podSpec(0, defaultCaps, false, true), "real-time scheduling"},
		{"SCHED_FIFO|SCHED_RESET_ON_FORK", []task{{tid: 1, caps: dflt, seccomp: filter, sched: 1 | 0x40000000}}, podSpec(0, defaultCaps, false, true), "real-time scheduling"},
		{"oom_score_adj -1000", []task{{tid: 1, caps: dflt, seccomp: filter, oomAdj: proto.Int32(-1000)}}, podSpec(0, defaultCaps, false, true), "oom_score_adj -1000"},
		{"oom_score_adj as the pod's", []task{{tid: 1, caps: dflt, seccomp: filter, oomAdj: proto.Int32(0)}}, podSpec(0, defaultCaps, false, true), ""},
		{"a hard limit within", []task{{tid: 1, caps: dflt, seccomp: filter, nofile: 4096}}, podSpec(0, defaultCaps, false, true), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tasks, err := Read(writeCheckpoint(t, tc.tasks...))
			if err != nil {
				t.Fatal(err)
			}
			err = Check(tasks, tc.spec)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want a refusal naming %q", err, tc.want)
			case tc.want != "":
				var r *Refusal
				if !errors.As(err, &r) {
					t.Errorf("%v is no *Refusal", err)
				}
			}
		})
	}
}

// What crit is handed is checked first: a size field past the file's end (which crit
// would allocate), a link, a thread without its core file, the old creds format.
func TestReadRefuses(t *testing.T) {
	t.Run("an entry past the end", func(t *testing.T) {
		dir := writeCheckpoint(t, task{tid: 1})
		b := binary.LittleEndian.AppendUint32(nil, imgCommonMagic)
		b = binary.LittleEndian.AppendUint32(b, 0x50273030) // PSTREE
		b = binary.LittleEndian.AppendUint32(b, 0xfffffff0)
		if err := os.WriteFile(filepath.Join(dir, "pstree.img"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "past the file's end") {
			t.Errorf("Read: %v, want the entry past the end refused", err)
		}
	})
	t.Run("another image's magic", func(t *testing.T) {
		// crit decodes by the file's magic: PAGEMAP's in pstree.img made it panic.
		dir := writeCheckpoint(t, task{tid: 1})
		b := binary.LittleEndian.AppendUint32(nil, imgCommonMagic)
		b = binary.LittleEndian.AppendUint32(b, uint32(magics.ByName["PAGEMAP"]))
		b = binary.LittleEndian.AppendUint32(b, 2)
		b = append(b, 0x08, 0x01)
		if err := os.WriteFile(filepath.Join(dir, "pstree.img"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "not a PSTREE image") {
			t.Errorf("Read: %v, want the magic refused", err)
		}
	})
	t.Run("a link", func(t *testing.T) {
		dir := writeCheckpoint(t, task{tid: 1})
		other := writeCheckpoint(t, task{tid: 1})
		os.Remove(filepath.Join(dir, "core-1.img"))
		if err := os.Symlink(filepath.Join(other, "core-1.img"), filepath.Join(dir, "core-1.img")); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(dir); err == nil {
			t.Error("Read followed a link")
		}
	})
	t.Run("a thread without its core", func(t *testing.T) {
		dir := writeCheckpoint(t, task{tid: 1})
		writeImage(t, dir, "pstree.img", "PSTREE", &pstree.PstreeEntry{Pid: proto.Uint32(1), Ppid: proto.Uint32(0), Pgid: proto.Uint32(1), Sid: proto.Uint32(1), Threads: []uint32{1, 7}})
		if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "core-7.img") {
			t.Errorf("Read: %v, want core-7.img named", err)
		}
	})
	t.Run("old creds", func(t *testing.T) {
		dir := writeCheckpoint(t, task{tid: 1})
		if err := os.WriteFile(filepath.Join(dir, "creds-1.img"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "creds-1.img") {
			t.Errorf("Read: %v, want creds-1.img named", err)
		}
	})
}
