//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Image volumes (KEP-4639): a CRI mount that names a pulled image gets the image's root
// filesystem (or a sub path of it) read-only, nosuid and nodev; ContainerStatus
// reports the image it mounted; the mount survives a kill -9 of the daemon and is undone
// with its container, even one the daemon died creating; RemoveImage of an image in use
// by a volume behaves as for one in use by a rootfs (unlisted, deleted with its last
// user).
func TestImageVolumes(t *testing.T) {
	e := newContainerEnv(t)
	const hello = "hello from the data image\n"
	e.reg.Push(t, "test/data", "1", ImageSpec{Layers: []Layer{{Files: []File{
		{Path: "/data", Dir: true},
		{Path: "/data/hello.txt", Content: hello},
		{Path: "/data/run.sh", Content: "#!/bin/sh\necho ran\n", Mode: 0o755},
		{Path: "/data/nested", Dir: true},
		{Path: "/data/nested/n.txt", Content: "nested"},
		{Path: "/data/owned.txt", Content: "owned", UID: 1000, GID: 1000},
		{Path: "/top.txt", Content: "top"},
	}}}}, nil)
	ref := e.reg.Ref("test/data", "1")
	imageMount := func(path, image, sub string) *runtimeapi.Mount {
		return &runtimeapi.Mount{ContainerPath: path, Image: &runtimeapi.ImageSpec{Image: image}, ImageSubPath: sub, Readonly: true}
	}

	t.Run("bad-input", func(t *testing.T) {
		e.t = t
		ctx := ctxT(t)
		if _, err := e.d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			t.Fatal(err)
		}
		podID, pod := e.pod("imgvol-bad", "runc")
		never := e.reg.Ref("test/data", "never-pushed")
		for _, tc := range []struct {
			name  string
			mount *runtimeapi.Mount
			code  codes.Code
			want  []string
		}{
			{"not pulled", imageMount("/vol", never, ""), codes.NotFound, []string{"config.mounts[1].image.image", never, "not pulled"}},
			{"sub path escaping", imageMount("/vol", ref, "../.."), codes.InvalidArgument, []string{"config.mounts[1].image_sub_path", `"../.."`}},
			{"absolute sub path", imageMount("/vol", ref, "/data"), codes.InvalidArgument, []string{"config.mounts[1].image_sub_path", `"/data"`}},
			{"sub path missing", imageMount("/vol", ref, "data/missing"), codes.InvalidArgument, []string{"config.mounts[1].image_sub_path", "data/missing", "does not exist"}},
			{"sub path through a file", imageMount("/vol", ref, "data/hello.txt/x"), codes.InvalidArgument, []string{"config.mounts[1].image_sub_path"}},
			{"not read-only", &runtimeapi.Mount{ContainerPath: "/vol", Image: &runtimeapi.ImageSpec{Image: ref}},
				codes.InvalidArgument, []string{"config.mounts[1].readonly is false", ref, "set readonly to true"}},
			{"host path and image", &runtimeapi.Mount{ContainerPath: "/vol", HostPath: t.TempDir(), Image: &runtimeapi.ImageSpec{Image: ref}},
				codes.InvalidArgument, []string{"config.mounts[1].host_path", "config.mounts[1].image.image", "both set"}},
		} {
			cfg := e.ctrConfig("bad", "sleep", "1000")
			cfg.Mounts = []*runtimeapi.Mount{imageMount("/ok", ref, "data"), tc.mount}
			_, err := e.d.RS.CreateContainer(ctx, podID, cfg, pod)
			msg := status.Convert(err).Message()
			if status.Code(err) != tc.code {
				t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%s: %q does not say %q", tc.name, msg, w)
				}
			}
		}
		if owners := storedVolumeOwners(t, e.d); len(owners) > 0 {
			t.Errorf("refused containers left image volumes of %v", owners)
		}
		if m := volumeMounts(e.d); len(m) > 0 {
			t.Errorf("refused containers left mounts %v", m)
		}
	})

	// In a pod user namespace an image volume that asks for the pod's mappings (kubelet
	// asks for every volume) shows the image's owners as the container's own.
	t.Run("runc-userns", func(t *testing.T) {
		e.t = t
		ctx := ctxT(t)
		if _, err := e.d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			t.Fatal(err)
		}
		pod := podConfig("imgvol-userns", runtimeapi.NamespaceMode_CONTAINER)
		pod.Linux.SecurityContext.NamespaceOptions.UsernsOptions = usernsOptions(300000)
		podID, err := e.d.RS.RunPodSandbox(ctx, pod, "runc")
		if err != nil {
			t.Fatalf("RunPodSandbox: %v", err)
		}
		opts := pod.Linux.SecurityContext.NamespaceOptions.UsernsOptions
		cfg := e.ctrConfig("app", "sleep", "1000")
		cfg.Linux.SecurityContext.NamespaceOptions = pod.Linux.SecurityContext.NamespaceOptions
		mapped := imageMount("/vol", ref, "data")
		mapped.UidMappings, mapped.GidMappings = opts.Uids, opts.Gids
		cfg.Mounts = []*runtimeapi.Mount{mapped, imageMount("/plain", ref, "data")}
		id := e.run(podID, pod, cfg)
		out, _, err := e.d.RS.ExecSync(ctx, id, []string{"stat", "-c", "%u:%g", "/vol/hello.txt", "/vol/owned.txt", "/plain/hello.txt"}, 20*time.Second)
		if want := "0:0\n1000:1000\n65534:65534\n"; err != nil || string(out) != want {
			t.Errorf("owners in the mapped and the plain image volume = %q, %v; want %q", out, err, want)
		}
		if out, _, err := e.d.RS.ExecSync(ctx, id, []string{"cat", "/vol/hello.txt", "/plain/hello.txt"}, 20*time.Second); err != nil || string(out) != hello+hello {
			t.Errorf("reading the image volumes in a user namespace: %q, %v", out, err)
		}
		if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
			t.Fatal(err)
		}
		if owners := storedVolumeOwners(t, e.d); len(owners) > 0 {
			t.Errorf("image volumes left after the pod was removed: %v", owners)
		}
		if m := volumeMounts(e.d); len(m) > 0 {
			t.Errorf("mounts left after the pod was removed: %v", m)
		}
	})

	for _, handler := range suiteHandlers {
		t.Run(handler, func(t *testing.T) {
			e.t = t
			ctx := ctxT(t)
			// kubelet pulls the image and sends what PullImage answered.
			id, err := e.d.IS.PullImage(ctx, imgSpec(ref), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			podID, pod := e.pod("imgvol-"+handler, handler)
			cfg := e.ctrConfig("vol", "sleep", "1000")
			cfg.Mounts = []*runtimeapi.Mount{imageMount("/vol", id, ""), imageMount("/sub", ref, "data")}
			ctr := e.run(podID, pod, cfg)
			execIn := func(cmd ...string) (string, error) {
				out, _, err := e.d.RS.ExecSync(ctx, ctr, cmd, 20*time.Second)
				return string(out), err
			}
			check := func(when string) {
				t.Helper()
				for _, c := range []struct{ path, want string }{
					{"/vol/data/hello.txt", hello}, {"/vol/top.txt", "top"},
					{"/sub/hello.txt", hello}, {"/sub/nested/n.txt", "nested"},
				} {
					if out, err := execIn("cat", c.path); err != nil || out != c.want {
						t.Errorf("%s: cat %s = %q, %v; want %q", when, c.path, out, err, c.want)
					}
				}
				if _, err := execIn("test", "-e", "/sub/top.txt"); err == nil {
					t.Errorf("%s: /sub holds the image's root, not its /data", when)
				}
				for _, p := range []string{"/vol/new", "/sub/new", "/vol/data/hello.txt"} {
					if _, err := execIn("sh", "-c", "echo x >> "+p); err == nil {
						t.Errorf("%s: wrote %s on a read-only image volume", when, p)
					}
				}
				// KEP-4639 dropped noexec (kubernetes/enhancements#5354): tools shipped
				// in an image volume run.
				if out, err := execIn("/sub/run.sh"); err != nil || strings.TrimSpace(out) != "ran" {
					t.Errorf("%s: /sub/run.sh from the image volume = %q, %v; want it to run", when, out, err)
				}
				resp, err := e.d.RS.ContainerStatus(ctx, ctr, false)
				if err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				got := map[string]*runtimeapi.Mount{}
				for _, m := range resp.Status.Mounts {
					got[m.ContainerPath] = m
				}
				if m := got["/vol"]; m.GetImage().GetImage() != id || m.GetImage().GetImageRef() != id || m.GetHostPath() != "" {
					t.Errorf("%s: status mount /vol = %v; want image %s, image_ref %s", when, m, id, id)
				}
				if m := got["/sub"]; m.GetImage().GetImage() != ref || m.GetImage().GetImageRef() != id || m.GetImageSubPath() != "data" {
					t.Errorf("%s: status mount /sub = %v; want image %s, image_ref %s, sub path data", when, m, ref, id)
				}
			}
			check("after start")
			sources := volumeSources(t, e.d, ctr)
			if len(sources) != 2 {
				t.Fatalf("record names %d image volumes, want 2", len(sources))
			}
			mounted := volumeMounts(e.d)
			if len(mounted) != 2 {
				t.Errorf("image volume mounts %v, want one per mount", mounted)
			}

			e.d.Restart(true)
			check("after kill -9 and restart")

			// A container the daemon died creating, before its record named its volumes.
			half := e.ctrConfig("half", "sleep", "1000")
			half.Mounts = []*runtimeapi.Mount{imageMount("/vol", id, "")}
			halfID, err := e.d.RS.CreateContainer(ctx, podID, half, pod)
			if err != nil {
				t.Fatal(err)
			}
			e.d.Kill()
			rewriteRecord(t, e.d, halfID)
			e.d.Start()
			if _, err := e.d.RS.ContainerStatus(ctx, halfID, false); status.Code(err) != codes.NotFound {
				t.Errorf("half-created container after restart: %v", err)
			}
			if owners := storedVolumeOwners(t, e.d); !slices.Equal(owners, []string{ctr, ctr}) {
				t.Errorf("image volumes after the half-created container was undone: owners %v, want only %s's two", owners, ctr[:12])
			}

			// RemoveImage of an image a volume uses: as for a rootfs image, it is no longer
			// listed, stays for its user, and no new container gets it.
			if err := e.d.IS.RemoveImage(ctx, imgSpec(ref)); err != nil {
				t.Fatalf("RemoveImage of an image in use by a volume: %v", err)
			}
			if st, err := e.d.IS.ImageStatus(ctx, imgSpec(id), false); err != nil || st.GetImage() != nil {
				t.Errorf("removed image still reported: %v %v", st.GetImage(), err)
			}
			if out, err := execIn("cat", "/vol/data/hello.txt"); err != nil || out != hello {
				t.Errorf("after RemoveImage the volume reads %q, %v", out, err)
			}
			late := e.ctrConfig("late", "sleep", "1000")
			late.Mounts = []*runtimeapi.Mount{imageMount("/vol", id, "")}
			if _, err := e.d.RS.CreateContainer(ctx, podID, late, pod); status.Code(err) != codes.NotFound ||
				!strings.Contains(err.Error(), "config.mounts[0].image.image") {
				t.Errorf("container on a removed image volume: %v, want NotFound naming config.mounts[0].image.image", err)
			}
			if !storedImage(t, e.d, id) {
				t.Error("image deleted while a volume used it")
			}

			// Removing the container undoes its volumes and deletes the image it kept.
			if err := e.d.RS.RemoveContainer(ctx, ctr); err != nil {
				t.Fatal(err)
			}
			if m := volumeMounts(e.d); len(m) > 0 {
				t.Errorf("mounts left after the container was removed: %v", m)
			}
			if owners := storedVolumeOwners(t, e.d); len(owners) > 0 {
				t.Errorf("image volumes left after the container was removed: %v", owners)
			}
			if storedImage(t, e.d, id) {
				t.Error("removed image kept after its last volume went")
			}
			if err := e.d.RS.RemovePodSandbox(ctx, podID); err != nil {
				t.Error(err)
			}
		})
	}
}

// storedContainers is the image store's containers (rootfs layers and image volumes).
func storedContainers(t *testing.T, d *Daemon) []struct {
	ID       string `json:"id"`
	Image    string `json:"image"`
	Metadata string `json:"metadata"`
} {
	t.Helper()
	var out []struct {
		ID       string `json:"id"`
		Image    string `json:"image"`
		Metadata string `json:"metadata"`
	}
	b, err := json.Marshal(storageRecords(t, d.State, d.RunRoot, "containers"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("storage containers: %v", err)
	}
	return out
}

// storedVolumeOwners lists the owner of each image volume in the store, sorted.
func storedVolumeOwners(t *testing.T, d *Daemon) []string {
	t.Helper()
	var out []string
	for _, c := range storedContainers(t, d) {
		var m struct {
			Owner string `json:"image_volume_of"`
		}
		if json.Unmarshal([]byte(c.Metadata), &m) == nil && m.Owner != "" {
			out = append(out, m.Owner)
		}
	}
	slices.Sort(out)
	return out
}

// storedImage reports whether the store still holds image id, listed or not.
func storedImage(t *testing.T, d *Daemon, id string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.State, "storage", "overlay-images", "images.json"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), strings.TrimPrefix(id, "sha256:"))
}

// volumeMounts lists the mounts of the store's layers that are image volumes: read-only
// overlays (no upper layer) under the store.
func volumeMounts(d *Daemon) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 10 || !strings.HasPrefix(fields[4], filepath.Join(d.State, "storage")+"/") {
			continue
		}
		if sep := slices.Index(fields, "-"); sep > 0 && sep+3 < len(fields) && fields[sep+1] == "overlay" &&
			!strings.Contains(fields[sep+3], "upperdir=") {
			out = append(out, fields[4])
		}
	}
	return out
}

// volumeSources are the host paths the container's record says its image volumes bind.
func volumeSources(t *testing.T, d *Daemon, id string) []string {
	t.Helper()
	resp, err := d.RS.ContainerStatus(ctxT(t), id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Metadata struct {
			ImageVolumes []struct {
				Source string `json:"source"`
			} `json:"image_volumes"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		t.Fatalf("verbose info: %v", err)
	}
	var out []string
	for _, v := range info.Metadata.ImageVolumes {
		out = append(out, v.Source)
	}
	return out
}

// rewriteRecord makes container id's record what a daemon that died in the middle of
// CreateContainer leaves: state creating, and no image volumes named.
func rewriteRecord(t *testing.T, d *Daemon, id string) {
	t.Helper()
	editRecord(t, d, "containers", id, func(b, _ []byte) ([]byte, []byte) {
		var meta map[string]json.RawMessage
		if err := json.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		if _, ok := meta["image_volumes"]; !ok {
			t.Errorf("record of %s names no image volumes", id[:12])
		}
		delete(meta, "image_volumes")
		b, err := json.Marshal(meta)
		if err != nil {
			t.Fatal(err)
		}
		return b, []byte(`{"state":"creating"}`)
	})
}
