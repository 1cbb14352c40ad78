//go:build integration

package integration

import (
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkImagePull pulls a multi-layer image from a registry on 127.0.0.1 through the
// daemon (CRI PullImage, then RemoveImage) and, interleaved in the same run, copies the
// same image with `skopeo copy` into a local directory: the floor. Each of 10 rounds does
// one of each; the metrics are medians and their ratio.
func BenchmarkImagePull(b *testing.B) {
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		b.Skip("skopeo not installed (make test installs it)")
	}
	reg := startRegistry(b, nil)
	rng := rand.New(rand.NewSource(1))
	var layers []Layer
	layers = append(layers, busyboxLayer(b))
	for i := 0; i < 4; i++ {
		data := make([]byte, 8<<20)
		rng.Read(data)
		layers = append(layers, Layer{Files: []File{{Path: "/data", Dir: true}, {Path: "/data/" + string(rune('a'+i)), Content: string(data)}}})
	}
	reg.Push(b, "bench/multilayer", "1", ImageSpec{Layers: layers}, nil)
	ref := reg.Ref("bench/multilayer", "1")
	d := newDaemon(b, withRegistries(reg.Addr))
	ctx := b.Context()

	var ours, floor, unpacked []time.Duration
	b.ResetTimer()
	for i := 0; i < 10; i++ {
		dir := filepath.Join(b.TempDir(), "copy")
		start := time.Now()
		out, err := exec.Command(skopeo, "copy", "--quiet", "--src-tls-verify=false", "docker://"+ref, "dir:"+dir).CombinedOutput()
		floor = append(floor, time.Since(start))
		if err != nil {
			b.Fatalf("skopeo copy: %v\n%s", err, out)
		}
		os.RemoveAll(dir)

		// A second reference point: skopeo into an overlay containers-storage, which
		// decompresses and unpacks every layer as a pull must.
		cs := b.TempDir()
		start = time.Now()
		out, err = exec.Command(skopeo, "copy", "--quiet", "--src-tls-verify=false", "docker://"+ref,
			"containers-storage:[overlay@"+cs+"/graph+"+cs+"/run]"+ref).CombinedOutput()
		unpacked = append(unpacked, time.Since(start))
		if err != nil {
			b.Fatalf("skopeo copy to containers-storage: %v\n%s", err, out)
		}
		_ = exec.Command("umount", "-l", cs+"/graph/overlay").Run()

		start = time.Now()
		if _, err := d.IS.PullImage(ctx, imgSpec(ref), nil, nil); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		if err := d.IS.RemoveImage(ctx, imgSpec(ref)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	mo, mf, mu := median(ours), median(floor), median(unpacked)
	b.ReportMetric(float64(mo.Milliseconds()), "rtshimd-pull-ms")
	b.ReportMetric(float64(mf.Milliseconds()), "skopeo-dir-ms")
	b.ReportMetric(float64(mu.Milliseconds()), "skopeo-cstorage-ms")
	b.ReportMetric(float64(mo)/float64(mf), "ratio-vs-dir")
	b.ReportMetric(float64(mo)/float64(mu), "ratio-vs-cstorage")
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
