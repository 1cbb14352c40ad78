//go:build integration

package integration

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkCreateDuringManyFilePull measures another pod's CreateContainer (busybox, runc)
// while a many-file image (manyFileImage: one layer of manyFiles empty files) is pulled,
// and while it is removed, against the same creates on the idle daemon in the same run:
// p99 of each and their ratio to idle (audit 2026-11-26, N3: a pull's extraction held
// containers/storage's layer lock, which the create path read through, and a removal held
// the image service's lock across the deletion). Creates run one after another for as long
// as the pull's extraction (the removal) lasts; they are removed after each phase.
func BenchmarkCreateDuringManyFilePull(b *testing.B) {
	reg := startRegistry(b, nil)
	reg.Push(b, "bench/busybox", "1", ImageSpec{Layers: []Layer{busyboxLayer(b)}, Config: ocispec.ImageConfig{Env: []string{"PATH=/bin"}}}, nil)
	reg.Push(b, "bench/many", "1", manyFileImage(manyFiles), nil)
	ref, many := reg.Ref("bench/busybox", "1"), reg.Ref("bench/many", "1")
	d := newDaemon(b, forBenchmark(), withRegistries(reg.Addr))
	ctx := b.Context()
	if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
		b.Fatal(err)
	}
	pod := podConfig("bench-stall", runtimeapi.NamespaceMode_CONTAINER)
	pod.LogDirectory = b.TempDir()
	podID, err := d.RS.RunPodSandbox(ctx, pod, "runc")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	var made []string
	create := func() time.Duration {
		n++
		cfg := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", n)},
			Image:    imgSpec(ref),
			Command:  []string{"sleep", "1000"},
			LogPath:  fmt.Sprintf("c%d.log", n),
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
			}},
		}
		start := time.Now()
		id, err := d.RS.CreateContainer(ctx, podID, cfg, pod)
		dt := time.Since(start)
		if err != nil {
			b.Fatalf("CreateContainer: %v", err)
		}
		made = append(made, id)
		return dt
	}
	// removeMade removes the containers made so far, after a phase: a removal waits for a
	// pull's extraction itself (containers/storage's container store, where image volumes
	// are looked up), which is not what is measured.
	removeMade := func() {
		for _, id := range made {
			if err := d.RS.RemoveContainer(ctx, id); err != nil {
				b.Fatalf("RemoveContainer: %v", err)
			}
		}
		made = nil
	}
	// creates times creates until done is closed (at least one).
	creates := func(done <-chan struct{}) []time.Duration {
		var out []time.Duration
		for {
			out = append(out, create())
			select {
			case <-done:
				return out
			default:
			}
		}
	}

	b.ResetTimer()
	create() // untimed: the first create's one-time costs
	var idle []time.Duration
	for i := 0; i < 30; i++ {
		idle = append(idle, create())
	}
	removeMade()

	overlay := filepath.Join(d.State, "storage", "overlay")
	pulled := make(chan struct{})
	var pullErr error
	go func() {
		defer close(pulled)
		_, pullErr = d.IS.PullImage(ctx, imgSpec(many), nil, nil)
	}()
	waitFor(b, 3*time.Minute, "the many-file layer's extraction to start", func() (bool, string) {
		m, _ := filepath.Glob(filepath.Join(overlay, "*", "diff", "many"))
		return len(m) > 0, "no layer directory with /many yet"
	})
	pullStart := time.Now()
	during := creates(pulled)
	pullWall := time.Since(pullStart)
	if pullErr != nil {
		b.Fatalf("PullImage: %v", pullErr)
	}
	removeMade()

	removed := make(chan struct{})
	var removeErr error
	go func() {
		defer close(removed)
		removeErr = d.IS.RemoveImage(ctx, imgSpec(many))
	}()
	removal := creates(removed)
	if removeErr != nil {
		b.Fatalf("RemoveImage: %v", removeErr)
	}
	b.StopTimer()
	removeMade()

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(pct(idle, 50)), "idle-p50-ms")
	b.ReportMetric(ms(pct(idle, 99)), "idle-p99-ms")
	b.ReportMetric(ms(pct(during, 50)), "pull-p50-ms")
	b.ReportMetric(ms(pct(during, 99)), "pull-p99-ms")
	b.ReportMetric(float64(pct(during, 99))/float64(pct(idle, 99)), "pull-p99-ratio")
	b.ReportMetric(float64(len(during)), "pull-creates")
	b.ReportMetric(pullWall.Seconds(), "pull-extraction-s")
	b.ReportMetric(ms(pct(removal, 99)), "removal-p99-ms")
	b.ReportMetric(float64(pct(removal, 99))/float64(pct(idle, 99)), "removal-p99-ratio")
	b.ReportMetric(float64(len(removal)), "removal-creates")
}
