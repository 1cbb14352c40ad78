//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func BenchmarkZZSpec(b *testing.B) {
	reg := startRegistry(b, nil)
	layer := busyboxLayer(b)
	reg.Push(b, "bench/busybox", "1", ImageSpec{Layers: []Layer{layer}}, nil)
	ref := reg.Ref("bench/busybox", "1")
	d := newDaemon(b, forBenchmark(), withRegistries(reg.Addr))
	ctx := b.Context()
	if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
		b.Fatal(err)
	}
	f := newFloor(b, layer)
	b.Cleanup(func() { removeTestCgroups(b) })
	cfg := podConfig("zz", runtimeapi.NamespaceMode_CONTAINER)
	cfg.Linux.CgroupParent = "/" + cgroupRoot + "/bench"
	pod, err := d.RS.RunPodSandbox(ctx, cfg, "runc")
	if err != nil {
		b.Fatal(err)
	}
	ctr, err := d.RS.CreateContainer(ctx, pod, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
		Image:    imgSpec(ref),
		Command:  []string{"/bin/sleep", "100000"},
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(d.RunRoot, "containers", ctr, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	ours := func() *specs.Spec {
		var s specs.Spec
		_ = json.Unmarshal(raw, &s)
		s.Annotations = nil
		return &s
	}
	variants := map[string]func() *specs.Spec{
		"floor": func() *specs.Spec {
			s := f.spec(b)
			s.Process.Args = []string{"/bin/sleep", "100000"}
			s.Process.Terminal = false
			return s
		},
		"floor-volatile": func() *specs.Spec {
			s := f.spec(b)
			s.Process.Args = []string{"/bin/sleep", "100000"}
			s.Process.Terminal = false
			s.Annotations = map[string]string{"volatile": "1"}
			return s
		},
	}
	_ = ours
	root := filepath.Join(f.dir, "runc")
	times := map[string][2][]time.Duration{}
	n := 0
	for round := 0; round < 20; round++ {
		for name, mk := range variants {
			n++
			id := fmt.Sprintf("zz-%d", n)
			base := filepath.Join(f.dir, id)
			for _, dd := range []string{"upper", "work", "rootfs"} {
				_ = os.MkdirAll(filepath.Join(base, dd), 0o755)
			}
			s := mk()
			s.Root = &specs.Root{Path: filepath.Join(base, "rootfs")}
			s.Linux.CgroupsPath = "/" + cgroupRoot + "/floor/" + id
			c, _ := json.Marshal(s)
			_ = os.WriteFile(filepath.Join(base, "config.json"), c, 0o644)
			rootfs := filepath.Join(base, "rootfs")
			opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", f.lower, filepath.Join(base, "upper"), filepath.Join(base, "work"))
			if name == "floor-volatile" {
				opts += ",volatile"
			}
			if err := syscall.Mount("overlay", rootfs, "overlay", 0, opts); err != nil {
				b.Fatal(err)
			}
			devnull, _ := os.Open(os.DevNull)
			t0 := time.Now()
			create := exec.Command("runc", "--root", root, "create", "--bundle", base, id)
			create.Stdin, create.Stdout, create.Stderr = devnull, devnull, devnull
			if err := create.Run(); err != nil {
				b.Fatalf("%s create: %v", name, err)
			}
			t1 := time.Now()
			if out, err := exec.Command("runc", "--root", root, "start", id).CombinedOutput(); err != nil {
				b.Fatalf("%s start: %v %s", name, err, out)
			}
			t2 := time.Now()
			v := times[name]
			v[0] = append(v[0], t1.Sub(t0))
			v[1] = append(v[1], t2.Sub(t1))
			times[name] = v
			f.mounts, f.ids = append(f.mounts, rootfs), append(f.ids, id)
		}
	}
	for name, v := range times {
		fmt.Printf("%-16s create %6.1f ms  start %6.1f ms\n", name, float64(pct(v[0], 50).Microseconds())/1000, float64(pct(v[1], 50).Microseconds())/1000)
	}
	f.cleanup(b)
	_ = d.RS.RemovePodSandbox(ctx, pod)
}
