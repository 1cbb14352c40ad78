//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// The Prometheus endpoint, scraped and parsed as Prometheus would.
func TestMetricsEndpoint(t *testing.T) {
	t.Cleanup(func() { removeTestCgroups(t) }) // first registered, so it runs after the daemon's cleanup
	reg := startRegistry(t, nil)
	reg.Push(t, "test/busybox", "1", ImageSpec{Layers: []Layer{busyboxLayer(t), toolsLayer()}, Config: ocispec.ImageConfig{Env: []string{"PATH=/bin"}}}, nil)
	addr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	d := newDaemon(t, withRegistries(reg.Addr), withConfig(func(_ *Daemon, c *config.Config) { c.Metrics.Addr = addr }))
	e := &containerEnv{t: t, d: d, image: reg.Ref("test/busybox", "1"), logs: t.TempDir()}
	ctx := ctxT(t)
	if _, err := d.IS.PullImage(ctx, imgSpec(e.image), nil, nil); err != nil {
		t.Fatal(err)
	}
	podID, pod := e.pod("metrics", "runc")
	e.run(podID, pod, e.ctrConfig("sleeper", "sleep", "1000"))
	_, _ = d.RS.RunPodSandbox(ctx, podConfig("nohandler", runtimeapi.NamespaceMode_CONTAINER), "no-such-handler")

	families := scrapeMetrics(t, addr)
	value := func(name string, labels map[string]string) float64 {
		v, ok := metricOf(families, name, labels)
		if !ok {
			t.Errorf("metric %s missing", name)
			return -1
		}
		return v
	}
	checks := []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"rtshimd_cri_request_duration_seconds", map[string]string{"method": "RunPodSandbox", "code": "OK"}, 1},
		{"rtshimd_cri_request_errors_total", map[string]string{"method": "RunPodSandbox", "code": "NotFound"}, 1},
		{"rtshimd_start_duration_seconds", map[string]string{"kind": "pod", "handler": "runc"}, 1},
		{"rtshimd_start_duration_seconds", map[string]string{"kind": "container", "handler": "runc"}, 1},
		{"rtshimd_running_pods", map[string]string{"handler": "runc"}, 1},
		{"rtshimd_running_containers", map[string]string{"handler": "runc"}, 1},
		{"rtshimd_monitors", nil, 1},
		{"rtshimd_image_pull_bytes_total", nil, 1 << 20},
		{"rtshimd_image_pull_duration_seconds", map[string]string{"result": "ok"}, 1},
	}
	for _, c := range checks {
		if v := value(c.name, c.labels); v < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, v, c.min)
		}
	}
	if v := value("rtshimd_running_pods", map[string]string{"handler": "runc"}); v != 1 {
		t.Errorf("running runc pods = %v, want exactly 1", v)
	}
	_ = d.RS.RemovePodSandbox(ctx, podID)
}

// scrapeMetrics reads /metrics at addr and parses it as Prometheus would.
func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// metricOf is the value of the first series of name whose labels include labels (a
// histogram's sample count); ok is false when there is no such metric at all, and a
// metric with no matching series reads 0.
func metricOf(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for k, v := range labels {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, true
}
