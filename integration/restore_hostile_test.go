//go:build integration

package integration

import (
	"archive/tar"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	criucore "github.com/checkpoint-restore/go-criu/v7/crit/images/criu-core"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/ckptsign"
	"github.com/rtshimd/rtshimd/internal/config"
)

// A checkpoint is untrusted input (security review R1, R3, R4): restore is off unless a
// row or the node turns it on, and refused by the key's name; with it on, a checkpoint
// whose processes would hold more than the new container's spec grants (a privileged
// container's, or one crafted with CRIT to hold every capability without seccomp) is
// refused by what it asks for, for a default pod and a PSA-restricted one; a checkpoint
// image's links are never followed, and its size is bounded by checkpoints.max_size. A
// restricted container's own checkpoint still restores into a restricted pod.
func TestRestoreHostile(t *testing.T) {
	nsPolicies := t.TempDir()
	if err := os.WriteFile(filepath.Join(nsPolicies, "strict.json"), []byte(`{"default": [{"type": "reject"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newContainerEnv(t, withRestore(), withConfig(func(d *Daemon, c *config.Config) {
		off := false
		c.Handlers["runc-off"] = &config.Handler{RuntimePath: "/usr/sbin/runc", RuntimeRoot: d.RunRoot + "/runc-off", Checkpoint: &off}
		c.Checkpoints.MaxSize = "48Mi"
		c.Image.SignaturePolicyDir = nsPolicies
	}))
	d := e.d
	ctx := ctxT(t)
	if why := criuCheck(t, "criu"); why != "" {
		t.Fatalf("CRIU in PATH does not work on this node (%s): make test installs CRIU 4.1.1 (hack/tools.sh install-criu)", why)
	}
	assertNoRestoreLeft := noRestoreLeft(t, d)
	checkpoint := func(id string) string {
		t.Helper()
		archive := filepath.Join(t.TempDir(), "c.tar")
		if err := d.RS.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: archive, Timeout: 60}); err != nil {
			t.Fatalf("CheckpointContainer: %v", err)
		}
		return archive
	}
	loop := []string{"sh", "-c", "while :; do sleep 1; done"}

	src, srcCfg := e.pod("hostile-src", "runc")
	privCfg := podConfig("hostile-priv", runtimeapi.NamespaceMode_CONTAINER)
	privCfg.LogDirectory = filepath.Join(e.logs, "hostile-priv")
	if privCfg.Linux.SecurityContext == nil {
		privCfg.Linux.SecurityContext = &runtimeapi.LinuxSandboxSecurityContext{}
	}
	privCfg.Linux.SecurityContext.Privileged = true
	privPod, err := d.RS.RunPodSandbox(ctx, privCfg, "runc")
	if err != nil {
		t.Fatalf("RunPodSandbox (privileged): %v", err)
	}
	priv := e.ctrConfig("priv", loop...)
	priv.Linux.SecurityContext.Privileged = true
	privArchive := checkpoint(e.run(privPod, privCfg, priv))
	e.removePod(privPod)
	plainArchive := checkpoint(e.run(src, srcCfg, e.ctrConfig("plain", loop...)))

	t.Run("off by default", func(t *testing.T) {
		off, offCfg := e.pod("hostile-off", "runc-off")
		_, err := d.RS.CreateContainer(ctx, off, withImage(e.ctrConfig("r"), plainArchive), offCfg)
		wantRefused(t, "an archive on a row without restore", err, codes.FailedPrecondition, `handler "runc-off"`, "checkpoints.restore = false")
		ref := pushCheckpointFiles(t, e, plainArchive, "off", nil)
		if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			t.Fatal(err)
		}
		_, err = d.RS.CreateContainer(ctx, off, withImage(e.ctrConfig("r"), ref), offCfg)
		wantRefused(t, "a checkpoint image on a row without restore", err, codes.FailedPrecondition, "checkpoints.restore = false")
		id := e.run(off, offCfg, e.ctrConfig("c", loop...))
		err = d.RS.CheckpointContainer(ctx, &runtimeapi.CheckpointContainerRequest{ContainerId: id, Location: filepath.Join(t.TempDir(), "x.tar"), Timeout: 60})
		wantRefused(t, "a checkpoint on a row without checkpoints", err, codes.FailedPrecondition, "handlers.runc-off.checkpoint = false")
		assertNoRestoreLeft("after the refusals")
		e.removePod(off)
	})

	// Restore takes only what this node (or a trusted key) signed: an unsigned checkpoint
	// and one signed by another key are refused by name.
	pod0, pod0Cfg := e.pod("hostile-sig", "runc")
	t.Run("signature", func(t *testing.T) {
		entries := readTar(t, plainArchive)
		unsigned := filepath.Join(t.TempDir(), "unsigned.tar")
		rewriteTar(t, plainArchive, unsigned, nil)
		dir := t.TempDir()
		for name, body := range entries {
			if strings.HasSuffix(name, "/") || name == ckptsign.SignatureFile {
				continue
			}
			p := filepath.Join(dir, name)
			_ = os.MkdirAll(filepath.Dir(p), 0o700)
			if err := os.WriteFile(p, body, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		tarDir(t, dir, unsigned)
		_, err := d.RS.CreateContainer(ctx, pod0, withImage(e.ctrConfig("r"), unsigned), pod0Cfg)
		wantRefused(t, "an unsigned checkpoint", err, codes.InvalidArgument, "not signed")
		ref := pushCheckpointFiles(t, e, unsigned, "unsigned", nil)
		if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			t.Fatal(err)
		}
		_, err = d.RS.CreateContainer(ctx, pod0, withImage(e.ctrConfig("r"), ref), pod0Cfg)
		wantRefused(t, "an unsigned checkpoint image", err, codes.InvalidArgument, "not signed")
		other, err := ckptsign.LoadOrCreateKey(filepath.Join(t.TempDir(), "other-key"))
		if err != nil {
			t.Fatal(err)
		}
		if err := ckptsign.Sign(dir, other); err != nil {
			t.Fatal(err)
		}
		foreign := filepath.Join(t.TempDir(), "foreign.tar")
		tarDir(t, dir, foreign)
		_, err = d.RS.CreateContainer(ctx, pod0, withImage(e.ctrConfig("r"), foreign), pod0Cfg)
		wantRefused(t, "a checkpoint signed by another key", err, codes.InvalidArgument, "neither this node's nor one of checkpoints.trusted_keys")
		assertNoRestoreLeft("after the signature refusals")
	})
	e.removePod(pod0)

	// A privileged container's checkpoint, restored into a default pod, from the archive
	// and as a checkpoint image (the audit's R1 reproduction).
	pod, podCfg := e.pod("hostile-dst", "runc")
	t.Run("privileged into default", func(t *testing.T) {
		_, err := d.RS.CreateContainer(ctx, pod, withImage(e.ctrConfig("r"), privArchive), podCfg)
		wantRefused(t, "a privileged checkpoint's archive", err, codes.InvalidArgument, "checkpoint refused", "CAP_SYS_ADMIN")
		ref := pushCheckpointFiles(t, e, privArchive, "priv", nil)
		if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			t.Fatal(err)
		}
		_, err = d.RS.CreateContainer(ctx, pod, withImage(e.ctrConfig("r"), ref), podCfg)
		wantRefused(t, "a privileged checkpoint image", err, codes.InvalidArgument, "CAP_SYS_ADMIN")
		assertNoRestoreLeft("after the privileged refusals")
	})

	// An ordinary checkpoint whose CRIU image is rewritten with CRIT: every capability,
	// no seccomp. Named by a PSA-restricted pod's container, it is refused by what it
	// asks for.
	t.Run("crafted into restricted", func(t *testing.T) {
		crafted := filepath.Join(t.TempDir(), "crafted.tar")
		cores := map[string][]byte{}
		for name, b := range readTar(t, plainArchive) {
			if strings.HasPrefix(name, "checkpoint/core-") {
				cores[name] = craftCore(t, b)
			}
		}
		if len(cores) == 0 {
			t.Fatal("no core image in the checkpoint")
		}
		rewriteTar(t, plainArchive, crafted, cores)
		// As crafted, its signature no longer holds: refused for that first.
		_, err := d.RS.CreateContainer(ctx, pod, withImage(e.ctrConfig("r"), crafted), podCfg)
		wantRefused(t, "a crafted checkpoint", err, codes.InvalidArgument, "changed since it was signed", "checkpoints.require_signature")
		// Signed again with the node's own key (a checkpoint the node trusts that was
		// crafted all the same): the CRIU image check refuses it by what it asks for.
		resignTar(t, d, crafted)
		restricted := e.ctrConfig("restricted")
		restricted.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			RunAsUser:        &runtimeapi.Int64Value{Value: 1000}, NoNewPrivs: true,
			Capabilities: &runtimeapi.Capability{DropCapabilities: []string{"ALL"}},
			Seccomp:      &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
		}
		_, err = d.RS.CreateContainer(ctx, pod, withImage(restricted, crafted), podCfg)
		wantRefused(t, "a crafted checkpoint into a restricted pod", err, codes.InvalidArgument, "checkpoint refused", "bounding set lacks", "CAP_SYS_MODULE")
		ref := pushCheckpointFiles(t, e, crafted, "crafted", nil)
		if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			t.Fatal(err)
		}
		_, err = d.RS.CreateContainer(ctx, pod, withImage(restricted, ref), podCfg)
		wantRefused(t, "a crafted checkpoint image into a restricted pod", err, codes.InvalidArgument, "CAP_SYS_MODULE")
		// Into a default pod: the same capabilities, and no seccomp where the pod has one.
		def := withImage(e.ctrConfig("r"), crafted)
		def.Linux.SecurityContext.Seccomp = &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
		_, err = d.RS.CreateContainer(ctx, pod, def, podCfg)
		wantRefused(t, "a crafted checkpoint into a default pod", err, codes.InvalidArgument, "CAP_SYS_ADMIN")
		assertNoRestoreLeft("after the crafted refusals")
	})

	// A confined container's own checkpoint (no capabilities, no_new_privs, the runtime's
	// default seccomp profile) restores into a pod as confined, and the restored process
	// holds what the pod grants. As root: CRIU reads a process's limits with prlimit(2),
	// which root may do to another user's process only with CAP_SYS_RESOURCE, which root
	// lacks on this machine, so a non-root container cannot be checkpointed here.
	t.Run("confined into confined", func(t *testing.T) {
		sc := func() *runtimeapi.LinuxContainerSecurityContext {
			return &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
				NoNewPrivs:       true,
				Capabilities:     &runtimeapi.Capability{DropCapabilities: []string{"ALL"}},
				Seccomp:          &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault},
			}
		}
		orig := e.ctrConfig("restricted-src", loop...)
		orig.Linux.SecurityContext = sc()
		archive := checkpoint(e.run(src, srcCfg, orig))
		cfg := withImage(e.ctrConfig("restricted-restored"), archive)
		cfg.Linux.SecurityContext = sc()
		id, err := d.RS.CreateContainer(ctx, pod, cfg, podCfg)
		if err != nil {
			t.Fatalf("CreateContainer (a restricted checkpoint into a restricted pod): %v", err)
		}
		if err := d.RS.StartContainer(ctx, id); err != nil {
			t.Fatalf("StartContainer (the restore): %v", err)
		}
		out, _ := e.exec(id, "sh", "-c", "grep -E '^(Uid|CapBnd|CapEff|Seccomp|NoNewPrivs):' /proc/1/status")
		t.Logf("the restored process: %s", strings.Join(strings.Fields(out), " "))
		fields := map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				fields[k] = strings.Fields(v)[0]
			}
		}
		if fields["Uid"] != "0" || fields["CapBnd"] != "0000000000000000" || fields["CapEff"] != "0000000000000000" || fields["Seccomp"] != "2" || fields["NoNewPrivs"] != "1" {
			t.Errorf("the restored process holds %v; want no capabilities, a seccomp filter and no_new_privs", fields)
		}
	})

	// A node-signed checkpoint of a container whose volume was writable, named by a
	// container whose same volume is read-only, is refused: CRIU would give the mount back
	// its old flags over the new source (second re-read S1).
	t.Run("a read-only volume stays read-only", func(t *testing.T) {
		vol := t.TempDir()
		rw := e.ctrConfig("rw-volume", loop...)
		rw.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: vol}}
		archive := checkpoint(e.run(src, srcCfg, rw))
		ro := withImage(e.ctrConfig("ro-volume"), archive)
		ro.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: vol, Readonly: true}}
		_, err := d.RS.CreateContainer(ctx, pod, ro, podCfg)
		wantRefused(t, "a writable volume's checkpoint into a read-only one", err, codes.InvalidArgument, "mount /data is ro")
		assertNoRestoreLeft("after the read-only refusal")
	})

	// A checkpoint image's links are refused, whatever they lead to, before anything reads
	// through them (the audit's R3), and its size is bounded (R4).
	t.Run("links and sizes", func(t *testing.T) {
		hostTar := filepath.Join(d.Dir, "host.tar")
		rewriteTar(t, plainArchive, hostTar, nil)
		for _, tc := range []struct {
			tag, says string
			files     func([]File) []File
		}{
			{"diff-link", "rootfs-diff.tar", func(fs []File) []File {
				return replaceFile(fs, File{Path: "/rootfs-diff.tar", Symlink: hostTar})
			}},
			{"ptmx", "spec.dump", func(fs []File) []File {
				return replaceFile(fs, File{Path: "/spec.dump", Symlink: "/dev/ptmx"})
			}},
			{"fifo", "rootfs-diff.tar", func(fs []File) []File {
				return replaceFile(fs, File{Path: "/rootfs-diff.tar", Fifo: true})
			}},
			{"big", "checkpoints.max_size", func(fs []File) []File {
				return append(fs, File{Path: "/checkpoint/pages-99.img", Content: strings.Repeat("\x00", 64<<20), Mode: 0o600})
			}},
		} {
			ref := pushCheckpointFiles(t, e, plainArchive, tc.tag, tc.files)
			if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err := d.RS.CreateContainer(ctx, pod, withImage(e.ctrConfig("r"), ref), podCfg)
			wantRefused(t, tc.tag, err, codes.InvalidArgument, tc.says)
			t.Logf("%s refused in %v", tc.tag, time.Since(start).Round(time.Millisecond))
		}
		assertNoRestoreLeft("after the hostile images")
	})
	// The image a checkpoint image's checkpoint was taken on is pulled as the pod's
	// namespace pulls any image, not taken from the node's store (the audit's R6): under a
	// namespace policy that rejects it the restore is refused, and a checkpoint naming its
	// image only by ID is refused.
	t.Run("base image pulled for the namespace", func(t *testing.T) {
		ref := pushCheckpointFiles(t, e, plainArchive, "base", nil)
		if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			t.Fatal(err)
		}
		strictCfg := podConfig("hostile-strict", runtimeapi.NamespaceMode_CONTAINER)
		strictCfg.Metadata.Namespace = "strict"
		strictCfg.LogDirectory = filepath.Join(e.logs, "hostile-strict")
		strict, err := d.RS.RunPodSandbox(ctx, strictCfg, "runc")
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.RS.CreateContainer(ctx, strict, withImage(e.ctrConfig("r"), ref), strictCfg)
		wantRefused(t, "a checkpoint image in a namespace whose policy rejects its base image", err, codes.FailedPrecondition, e.image, `namespace "strict"`)
		e.removePod(strict)

		var dump map[string]any
		entries := readTar(t, plainArchive)
		if err := json.Unmarshal(entries["config.dump"], &dump); err != nil {
			t.Fatal(err)
		}
		dump["rootfsImage"], dump["rootfsImageName"] = dump["rootfsImageRef"], ""
		b, _ := json.Marshal(dump)
		byID := filepath.Join(t.TempDir(), "by-id.tar")
		rewriteTar(t, plainArchive, byID, map[string][]byte{"config.dump": b})
		resignTar(t, d, byID)
		ref = pushCheckpointFiles(t, e, byID, "by-id", nil)
		if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			t.Fatal(err)
		}
		_, err = d.RS.CreateContainer(ctx, pod, withImage(e.ctrConfig("r"), ref), podCfg)
		wantRefused(t, "a checkpoint image naming its base image by ID", err, codes.InvalidArgument, "only by ID")
		assertNoRestoreLeft("after the base image refusals")
	})
	e.removePod(pod)
	e.removePod(src)
	assertNoRestoreLeft("after the pods' removal")
}

// resignTar signs the checkpoint archive at path again with the daemon's own key, as if
// the node had written it.
func resignTar(t *testing.T, d *Daemon, path string) {
	t.Helper()
	key, err := ckptsign.LoadOrCreateKey(filepath.Join(d.State, "checkpoint-key"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, body := range readTar(t, path) {
		if strings.HasSuffix(name, "/") {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := ckptsign.Sign(dir, key); err != nil {
		t.Fatal(err)
	}
	tarDir(t, dir, path)
}

// tarDir writes dir's files as an uncompressed tar at path, replacing it.
func tarDir(t *testing.T, dir, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// noRestoreLeft returns a check that d's state root holds no unpacked checkpoint.
func noRestoreLeft(t *testing.T, d *Daemon) func(when string) {
	restores := filepath.Join(d.Dir, "state", "restores")
	return func(when string) {
		t.Helper()
		if left, _ := os.ReadDir(restores); len(left) != 0 {
			t.Errorf("%s: %s holds %s", when, restores, left[0].Name())
		}
	}
}

// craftCore rewrites a CRIU core image (one task's) to hold every capability in every set
// and no seccomp filter: what `crit decode`, an edit and `crit encode` make.
func craftCore(t *testing.T, b []byte) []byte {
	t.Helper()
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.img"), filepath.Join(dir, "out.img")
	if err := os.WriteFile(in, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := crit.New(f, nil, "", false, false).Decode(&criucore.CoreEntry{})
	if err != nil {
		t.Fatalf("decode the core image: %v", err)
	}
	core := img.Entries[0].Message.(*criucore.CoreEntry)
	all := []uint32{0xffffffff, 0x1ff}
	cr := core.GetThreadCore().GetCreds()
	cr.CapInh, cr.CapPrm, cr.CapEff, cr.CapBnd = all, all, all, all
	core.GetThreadCore().SeccompMode = criucore.SeccompMode_disabled.Enum()
	o, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := crit.New(nil, o, "", false, false).Encode(img); err != nil {
		t.Fatalf("encode the core image: %v", err)
	}
	crafted, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return crafted
}

// pushCheckpointFiles pushes the archive as a checkpoint image (pushCheckpointImage's
// recipe) under tag, its files changed by edit (nil: as they are).
func pushCheckpointFiles(t *testing.T, e *containerEnv, archive, tag string, edit func([]File) []File) string {
	t.Helper()
	var files []File
	for name, b := range readTar(t, archive) {
		files = append(files, File{Path: "/" + strings.TrimSuffix(name, "/"), Content: string(b), Dir: strings.HasSuffix(name, "/"), Mode: 0o600})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	if edit != nil {
		files = edit(files)
	}
	e.reg.Push(t, "test/hostile-checkpoint", tag, ImageSpec{
		Layers:      []Layer{{Files: files}},
		Annotations: map[string]string{"org.criu.checkpoint.container.name": "c" + strconv.Itoa(len(tag))},
	}, nil)
	return e.reg.Ref("test/hostile-checkpoint", tag)
}

// replaceFile is files with the one at f.Path replaced by f.
func replaceFile(files []File, f File) []File {
	out := []File{f}
	for _, x := range files {
		if x.Path != f.Path {
			out = append(out, x)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
