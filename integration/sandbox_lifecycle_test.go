//go:build integration

package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// sandboxInfo is the part of PodSandboxStatus's verbose info the tests look at.
type sandboxInfo struct {
	Metadata struct {
		Handler     string `json:"handler"`
		Dir         string `json:"dir"`
		BundleDir   string `json:"bundle_dir"`
		Kind        string `json:"kind"`
		NetNS       string `json:"netns"`
		IPCNS       string `json:"ipcns"`
		UTSNS       string `json:"utsns"`
		Shm         string `json:"shm"`
		Files       string `json:"files"`
		Tmpfs       string `json:"tmpfs"`
		TmpfsHome   bool   `json:"tmpfs_home"`
		Infra       bool   `json:"infra"`
		CgroupsPath string `json:"cgroups_path"`
	} `json:"metadata"`
	Status struct {
		State      string `json:"state"`
		InfraPid   int    `json:"infra_pid"`
		MonitorPid int    `json:"monitor_pid"`
	} `json:"status"`
}

func TestSandboxLifecycle(t *testing.T) {
	d := newDaemon(t)
	cases := []struct {
		name, handler, resolved string
		pid                     runtimeapi.NamespaceMode
		infra                   bool
		// tmpfsHome: the pod's tmpfs is in the pin home, not on the node (runc's, without
		// a sandbox container).
		tmpfsHome bool
	}{
		{"runc-no-infra", "runc", "runc", runtimeapi.NamespaceMode_CONTAINER, false, true},
		{"runc-shared-pid", "runc", "runc", runtimeapi.NamespaceMode_POD, true, false},
		{"default-handler", "", "runc", runtimeapi.NamespaceMode_CONTAINER, false, true},
		{"runsc", "runsc", "runsc", runtimeapi.NamespaceMode_CONTAINER, true, false},
		{"runc-shim", "runc-shim", "runc-shim", runtimeapi.NamespaceMode_CONTAINER, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			cfg := podConfig(tc.name, tc.pid)
			id, err := d.RS.RunPodSandbox(ctx, cfg, tc.handler)
			if err != nil {
				t.Fatalf("RunPodSandbox(%q): %v", tc.handler, err)
			}
			resp, err := d.RS.PodSandboxStatus(ctx, id, true)
			if err != nil {
				t.Fatal(err)
			}
			st := resp.Status
			if st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Errorf("state = %v, want READY", st.State)
			}
			if st.Metadata.Name != tc.name || st.Metadata.Uid != cfg.Metadata.Uid || st.Metadata.Attempt != 1 {
				t.Errorf("metadata = %v", st.Metadata)
			}
			if st.Labels["app"] != tc.name || st.Annotations["rtshimd.test/annotation"] != "value of "+tc.name {
				t.Errorf("labels %v / annotations %v did not round-trip", st.Labels, st.Annotations)
			}
			if st.RuntimeHandler != tc.handler {
				t.Errorf("runtime_handler = %q, want %q", st.RuntimeHandler, tc.handler)
			}
			if st.Linux.GetNamespaces().GetOptions().GetPid() != tc.pid {
				t.Errorf("namespace options = %v", st.Linux.GetNamespaces().GetOptions())
			}
			info := decodeInfo(t, resp.Info)
			if info.Metadata.Handler != tc.resolved || info.Metadata.Infra != tc.infra || info.Metadata.TmpfsHome != tc.tmpfsHome {
				t.Errorf("handler %q infra %v tmpfs in the home %v, want %q %v %v", info.Metadata.Handler, info.Metadata.Infra,
					info.Metadata.TmpfsHome, tc.resolved, tc.infra, tc.tmpfsHome)
			}
			checkPodFiles(t, info, tc.name)
			checkNamespaces(t, info, tc.resolved, tc.name)
			if tc.infra {
				checkInfra(t, info, cfg)
			}

			// List with each filter.
			for _, f := range []struct {
				name   string
				filter *runtimeapi.PodSandboxFilter
				want   bool
			}{
				{"id prefix", &runtimeapi.PodSandboxFilter{Id: id[:12]}, true},
				{"state ready", &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}, true},
				{"state notready", &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}, false},
				{"label match", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": tc.name, "suite": "rtshimd"}}, true},
				{"label mismatch", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "other"}}, false},
			} {
				items, err := d.RS.ListPodSandbox(ctx, f.filter)
				if err != nil {
					t.Fatal(err)
				}
				if got := containsSandbox(items, id); got != f.want {
					t.Errorf("ListPodSandbox(%s): contains %v, want %v", f.name, got, f.want)
				}
			}

			// Stop: NOTREADY, the infra gone; a second Stop is no error.
			if err := d.RS.StopPodSandbox(ctx, id); err != nil {
				t.Fatalf("StopPodSandbox: %v", err)
			}
			resp2, err := d.RS.PodSandboxStatus(ctx, id, false)
			if err != nil {
				t.Fatal(err)
			}
			if resp2.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				t.Errorf("state after stop = %v", resp2.Status.State)
			}
			if tc.infra && processAlive(info.Status.InfraPid) {
				t.Errorf("infra pid %d still running after stop", info.Status.InfraPid)
			}
			if err := d.RS.StopPodSandbox(ctx, id); err != nil {
				t.Errorf("second StopPodSandbox: %v", err)
			}

			// Remove: gone everywhere; Remove and Stop again are no error.
			if err := d.RS.RemovePodSandbox(ctx, id); err != nil {
				t.Fatalf("RemovePodSandbox: %v", err)
			}
			if _, err := d.RS.PodSandboxStatus(ctx, id, false); status.Code(err) != codes.NotFound {
				t.Errorf("status after remove: %v, want NotFound", err)
			}
			items, _ := d.RS.ListPodSandbox(ctx, nil)
			if containsSandbox(items, id) {
				t.Error("removed sandbox still listed")
			}
			if err := d.RS.RemovePodSandbox(ctx, id); err != nil {
				t.Errorf("second RemovePodSandbox: %v", err)
			}
			if err := d.RS.StopPodSandbox(ctx, id); err != nil {
				t.Errorf("StopPodSandbox after remove: %v", err)
			}
			if _, err := os.Stat(info.Metadata.Dir); !os.IsNotExist(err) {
				t.Errorf("sandbox dir %s still there (%v)", info.Metadata.Dir, err)
			}
			if info.Metadata.CgroupsPath != "" {
				for _, ctl := range []string{"memory", "pids", "cpu"} {
					p := filepath.Join("/sys/fs/cgroup", ctl, info.Metadata.CgroupsPath)
					if _, err := os.Stat(p); !os.IsNotExist(err) {
						t.Errorf("cgroup %s left behind", p)
					}
				}
			}
		})
	}
	removeTestCgroups(t)
}

// checkPodFiles: hostname, resolv.conf from dns_config, hosts, and the pod's own shm.
func checkPodFiles(t *testing.T, info sandboxInfo, hostname string) {
	t.Helper()
	m := info.Metadata
	files, shm := podFilesDir(info), m.Shm
	if m.TmpfsHome {
		// In the pin home, read through its link; on the node, the place it is lent to
		// while a container is created is no mount.
		shm = filepath.Join(filepath.Dir(files), "shm")
		if mounts := mountsUnder(m.Tmpfs); m.Tmpfs == "" || len(mounts) != 0 {
			t.Errorf("pod tmpfs %q in the home, but mounted on the node: %v", m.Tmpfs, mounts)
		}
		if m.Files != filepath.Join(m.Tmpfs, "files") || m.Shm != filepath.Join(m.Tmpfs, "shm") {
			t.Errorf("pod files %q and shm %q are not where the tmpfs %q is lent", m.Files, m.Shm, m.Tmpfs)
		}
	} else if tmpfs := filepath.Dir(m.Shm); m.Shm == "" || !contains(mountsUnder(tmpfs), tmpfs) || filepath.Dir(m.Files) != tmpfs {
		// One tmpfs of the pod's holds its /dev/shm and its files.
		t.Errorf("pod shm %q and files %q are not in a mount of the pod's", m.Shm, m.Files)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(files, name))
		if err != nil {
			t.Errorf("pod file %s: %v", name, err)
		}
		return string(b)
	}
	if got := read("hostname"); got != hostname+"\n" {
		t.Errorf("hostname file = %q", got)
	}
	want := "nameserver 10.96.0.10\nsearch rtshimd-test.svc.cluster.local svc.cluster.local\noptions ndots:5\n"
	if got := read("resolv.conf"); got != want {
		t.Errorf("resolv.conf = %q, want %q", got, want)
	}
	if got := read("hosts"); !strings.Contains(got, "127.0.0.1\tlocalhost") {
		t.Errorf("hosts = %q", got)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(shm, &sfs); err != nil || sfs.Type != 0x01021994 { // TMPFS_MAGIC
		t.Errorf("pod shm is not a tmpfs (type %x, %v)", sfs.Type, err)
	}
}

// podFilesDir is where the node reads a pod's files (hostname, hosts, resolv.conf):
// through the pin home's link when the pod's tmpfs is there (a runc pod's).
func podFilesDir(info sandboxInfo) string {
	m := info.Metadata
	if !m.TmpfsHome {
		return m.Files
	}
	return filepath.Join(filepath.Dir(filepath.Dir(m.Dir)), "pinned", filepath.Base(m.Dir), "tmpfs", "files")
}

// checkNamespaces: the runc family gets daemon-pinned net, ipc and uts namespaces with
// the pod's hostname; shared-sandbox handlers get a pinned netns only.
func checkNamespaces(t *testing.T, info sandboxInfo, handler, hostname string) {
	t.Helper()
	m := info.Metadata
	if !isNsfs(m.NetNS) {
		t.Errorf("netns %q is not a pinned namespace", m.NetNS)
	}
	// Pinned in the daemon's pin home, not in the node's mount table that every runc
	// reads: there the pod has its tmpfs and a sandbox container's root, or nothing when
	// its tmpfs is in the home too.
	var podMounts []string
	for _, p := range mountsUnder(filepath.Dir(m.Dir)) {
		if strings.Contains(p, filepath.Base(m.Dir)) {
			podMounts = append(podMounts, p)
		}
	}
	most := 2 // its tmpfs, and a sandbox container's root
	if m.TmpfsHome {
		most = 0
	}
	if slices.ContainsFunc(podMounts, func(p string) bool { return strings.Contains(p, "/ns/") }) || len(podMounts) > most {
		t.Errorf("the pod's mounts in the node's mount table: %v, want at most %d (none when its tmpfs is in the pin home)", podMounts, most)
	}
	if handler == "runsc" {
		if m.IPCNS != "" || m.UTSNS != "" {
			t.Errorf("runsc pod pinned ipc %q / uts %q; the sandbox owns those", m.IPCNS, m.UTSNS)
		}
		return
	}
	if !isNsfs(m.IPCNS) || !isNsfs(m.UTSNS) {
		t.Errorf("ipc %q / uts %q not pinned", m.IPCNS, m.UTSNS)
	}
	out, err := exec.Command("nsenter", "--uts="+m.UTSNS, "hostname").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != hostname {
		t.Errorf("hostname in pod UTS namespace = %q (%v), want %q", out, err, hostname)
	}
	if host, _ := os.Hostname(); host == hostname {
		t.Fatalf("test hostname equals the node's; the check above proves nothing")
	}
}

// checkInfra: the infra process runs in the pod's network namespace, under the pod's
// cgroup parent, with the clamped oom_score_adj, supervised by a monitor.
func checkInfra(t *testing.T, info sandboxInfo, cfg *runtimeapi.PodSandboxConfig) {
	t.Helper()
	pid := info.Status.InfraPid
	if !processAlive(pid) {
		t.Fatalf("infra pid %d not running", pid)
	}
	if !processAlive(info.Status.MonitorPid) {
		t.Errorf("monitor pid %d not running", info.Status.MonitorPid)
	}
	if sameFile(fmt.Sprintf("/proc/%d/ns/net", pid), info.Metadata.NetNS) == false {
		t.Errorf("infra pid %d is not in the pod netns %s", pid, info.Metadata.NetNS)
	}
	wantCg := cfg.Linux.CgroupParent + "/"
	if !strings.HasPrefix(info.Metadata.CgroupsPath, wantCg) {
		t.Errorf("cgroups path %q not under the pod's cgroup parent %q", info.Metadata.CgroupsPath, cfg.Linux.CgroupParent)
	}
	if err := cgroupExists(info.Metadata.CgroupsPath); err != nil {
		t.Errorf("infra cgroup: %v", err)
	}
	// kubelet's -998 for sandbox containers, clamped to what the daemon may set (its own
	// value, inherited from this test process) on nodes without CAP_SYS_RESOURCE.
	own := readInt(t, "/proc/self/oom_score_adj")
	if got := readInt(t, fmt.Sprintf("/proc/%d/oom_score_adj", pid)); got != max(-998, own) {
		t.Errorf("infra oom_score_adj = %d, want %d", got, max(-998, own))
	}
}

func TestConcurrentSandboxes(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			handler := []string{"runc", "runsc"}[i%2]
			ids[i], errs[i] = d.RS.RunPodSandbox(ctx, podConfig(fmt.Sprintf("burst-%d", i), runtimeapi.NamespaceMode_POD), handler)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("pod %d: %v", i, err)
		}
	}
	items, err := d.RS.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"suite": "rtshimd"}})
	if err != nil || len(items) != len(ids) {
		t.Fatalf("listed %d sandboxes (%v), want %d", len(items), err, len(ids))
	}
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.RS.RemovePodSandbox(ctx, ids[i])
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("remove pod %d: %v", i, err)
		}
	}
	removeTestCgroups(t)
}

func TestSandboxNameConflict(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	cfg := podConfig("twice", runtimeapi.NamespaceMode_CONTAINER)
	id, err := d.RS.RunPodSandbox(ctx, cfg, "runc")
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.RS.RunPodSandbox(ctx, cfg, "runc")
	if status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), id) {
		t.Errorf("second RunPodSandbox with the same metadata: %v, want AlreadyExists naming %s", err, id)
	}
	// After removal the name is free again.
	if err := d.RS.RemovePodSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	id2, err := d.RS.RunPodSandbox(ctx, cfg, "runc")
	if err != nil {
		t.Fatalf("name not released after remove: %v", err)
	}
	_ = d.RS.RemovePodSandbox(ctx, id2)
}

func containsSandbox(items []*runtimeapi.PodSandbox, id string) bool {
	for _, it := range items {
		if it.Id == id {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func isNsfs(path string) bool {
	var st syscall.Statfs_t
	return path != "" && syscall.Statfs(path, &st) == nil && st.Type == 0x6e736673 // NSFS_MAGIC
}

func sameFile(a, b string) bool {
	var sa, sb syscall.Stat_t
	if syscall.Stat(a, &sa) != nil || syscall.Stat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// removeTestCgroups removes the pod cgroup parents the runtimes created for the tests'
// cgroup_parent values (kubelet owns those on a real node), failing if any still holds a
// container's cgroup.
func removeTestCgroups(t testing.TB) {
	t.Helper()
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + cgroupRoot)
	for _, root := range roots {
		for _, dir := range cgroupDirsBottomUp(root) {
			if depth := strings.Count(strings.TrimPrefix(dir, root), "/"); depth > 1 {
				t.Errorf("container cgroup left behind: %s", dir)
			}
			_ = os.Remove(dir)
		}
	}
}

// cgroupDirsBottomUp lists a cgroup directory and those under it, children first, in the
// order they can be removed.
func cgroupDirsBottomUp(root string) []string {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, de os.DirEntry, err error) error {
		if err == nil && de.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	return dirs
}

// A sandboxing handler's pod is bounded as a whole: the pod's limits plus the handler's
// overhead, on the sandbox's cgroup.
func TestHandlerOverheadOnPodCgroup(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	cfg := podConfig("overhead", runtimeapi.NamespaceMode_CONTAINER)
	cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20, CpuPeriod: 100000, CpuQuota: 50000}
	id, err := d.RS.RunPodSandbox(ctx, cfg, "runsc")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := d.RS.PodSandboxStatus(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	cg := decodeInfo(t, resp.Info).Metadata.CgroupsPath
	mem := readCgroupInt(t, "memory", cg, "memory.limit_in_bytes")
	quota := readCgroupInt(t, "cpu", cg, "cpu.cfs_quota_us")
	// The test table gives runsc 64Mi and 100m of overhead.
	if mem != (128+64)<<20 || quota != 50000+10000 {
		t.Errorf("sandbox cgroup memory %d quota %d, want %d and %d", mem, quota, (128+64)<<20, 60000)
	}
	if err := d.RS.RemovePodSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	removeTestCgroups(t)
}

// CreateContainer and StartContainer race StopPodSandbox and RemovePodSandbox: whichever
// way each round goes, no container outlives its pod (the pod's lifecycle lock is held
// shared by create and start, exclusively by stop and remove).
func TestContainerCreateRacesPodRemoval(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	for i := 0; i < 8; i++ {
		podID, pod := e.pod(fmt.Sprintf("race-%d", i), "runc")
		created := make(chan error, 1)
		go func() {
			id, err := e.d.RS.CreateContainer(ctx, podID, e.ctrConfig("app", "sleep", "1000"), pod)
			if err == nil {
				err = e.d.RS.StartContainer(ctx, id)
			}
			created <- err
		}()
		time.Sleep(time.Duration(i*15) * time.Millisecond)
		if err := e.d.RS.StopPodSandbox(ctx, podID); err != nil {
			t.Fatalf("round %d: StopPodSandbox: %v", i, err)
		}
		if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
			t.Fatalf("round %d: RemovePodSandbox: %v", i, err)
		}
		err := <-created
		if c := status.Code(err); err != nil && c != codes.FailedPrecondition && c != codes.NotFound {
			t.Errorf("round %d: create/start lost the race with %v, want FailedPrecondition or NotFound", i, err)
		}
		t.Logf("round %d: create/start: %v", i, err)
		ctrs, err := e.d.RS.ListContainers(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ctrs {
			t.Errorf("round %d: container %s (%s) outlived its removed pod %s", i, c.Id[:12], c.State, c.PodSandboxId[:12])
		}
	}
}

// A pod whose RunPodSandbox fails and whose cleanup then fails too (a failpoint, twice) is
// not dropped with its namespaces and mounts: it stays listed NOTREADY with its name
// reserved until a background retry removes it; then nothing of it is left.
func TestFailedSandboxCleanupIsRetried(t *testing.T) {
	d := newDaemon(t)
	d.Env = []string{"RTSHIMD_FAILPOINTS=sandbox-cleanup=2"}
	d.Restart(false)
	ctx := ctxT(t)
	// The sandbox container cannot start: runc fails to write a sysctl the kernel lacks.
	cfg := podConfig("sandbox-cleanup-retry", runtimeapi.NamespaceMode_POD)
	cfg.Linux.Sysctls = map[string]string{"net.ipv4.rtshimd_no_such_sysctl": "1"}
	if _, err := d.RS.RunPodSandbox(ctx, cfg, "runc"); err == nil {
		t.Fatal("RunPodSandbox with an impossible sysctl succeeded")
	}
	pods, err := d.RS.ListPodSandbox(ctx, nil)
	if err != nil || len(pods) != 1 || pods[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("after a failed run and a failed cleanup: pods %v (%v), want one NOTREADY", pods, err)
	}
	id := pods[0].Id
	if _, err := d.RS.RunPodSandbox(ctx, cfg, "runc"); status.Code(err) != codes.AlreadyExists {
		t.Errorf("the kept pod's name is free again too early: %v", err)
	}
	if mounts := mountsUnder(filepath.Join(d.RunRoot, "sandboxes", id)); len(mounts) == 0 {
		t.Errorf("the kept pod holds no mounts; the test proves nothing")
	}
	waitFor(t, 60*time.Second, "the background cleanup to succeed", func() (bool, string) {
		pods, err := d.RS.ListPodSandbox(ctx, nil)
		return err == nil && len(pods) == 0, fmt.Sprint(len(pods), err)
	})
	if mounts := mountsUnder(filepath.Join(d.RunRoot, "sandboxes", id)); len(mounts) != 0 {
		t.Errorf("mounts left after the cleanup: %v", mounts)
	}
	if p := filepath.Join(d.RunRoot, "sandboxes", id); !isGone(p) {
		t.Errorf("%s left after the cleanup", p)
	}
	if slices.Contains(stateEntries(filepath.Join(d.State, "sandboxes")), id) {
		t.Errorf("record of %s left after the cleanup", id[:12])
	}
}

// A runc pod's tmpfs is in the pin home and lent to the node only while a container is
// created: its containers share /dev/shm and see the pod's files, also one created after
// a kill -9 of the daemon; meanwhile the node's mount table holds nothing of the pod, and
// the pod's removal leaves nothing in the home.
func TestPodTmpfsInHome(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	podID, pod := e.pod("tmpfs-home", "runc")
	a := e.run(podID, pod, e.ctrConfig("a", "sleep", "1000"))
	resp, err := e.d.RS.PodSandboxStatus(ctx, podID, true)
	if err != nil {
		t.Fatal(err)
	}
	m := decodeInfo(t, resp.Info).Metadata
	if !m.TmpfsHome {
		t.Fatalf("runc pod's tmpfs is not in the pin home: %+v", m)
	}
	home := filepath.Join(e.d.RunRoot, "pinned", podID)
	nothingOnNode := func(when string) {
		t.Helper()
		if mounts := mountsUnder(m.Dir); len(mounts) != 0 {
			t.Errorf("%s: the pod's mounts on the node: %v, want none", when, mounts)
		}
	}
	nothingOnNode("after a container's create")
	e.exec(a, "sh", "-c", "echo from-a > /dev/shm/f")
	if b, err := os.ReadFile(filepath.Join(home, "tmpfs", "shm", "f")); err != nil || string(b) != "from-a\n" {
		t.Errorf("the container's /dev/shm write in the home: %q, %v", b, err)
	}
	if out, _ := e.exec(a, "cat", "/etc/hostname"); out != "tmpfs-home" {
		t.Errorf("/etc/hostname in the container = %q", out)
	}
	if out, _ := e.exec(a, "grep", "-c", "localhost", "/etc/hosts"); out == "" || out == "0" {
		t.Errorf("/etc/hosts in the container has no localhost: %q", out)
	}
	e.d.Kill()
	e.d.Start()
	b := e.run(podID, pod, e.ctrConfig("b", "sleep", "1000"))
	if out, _ := e.exec(b, "cat", "/dev/shm/f"); out != "from-a" {
		t.Errorf("/dev/shm of a container created after a kill -9 = %q, want the other container's file", out)
	}
	nothingOnNode("after a kill -9 and another container's create")
	if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(home); !os.IsNotExist(err) {
		t.Errorf("the pod's directory in the pin home after its removal: %v", err)
	}
	if _, err := os.Stat(m.Dir); !os.IsNotExist(err) {
		t.Errorf("sandbox dir %s after the removal: %v", m.Dir, err)
	}
}
