// Package metrics holds rtshimd's Prometheus metrics and serves them: RPC latency and
// errors, pod and container start latency by handler, running pods and containers by
// handler, image pulls, monitors, failures of each handler's runtime binary, and NRI
// requests. It is off unless an address is configured.
package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
)

var (
	// RPCDuration is every CRI call's latency, by method and code.
	RPCDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rtshimd_cri_request_duration_seconds", Help: "Latency of CRI requests.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"method", "code"})
	// RPCErrors counts CRI calls that failed, by method and code.
	RPCErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rtshimd_cri_request_errors_total", Help: "CRI requests that returned an error.",
	}, []string{"method", "code"})
	// StartDuration is the latency of starting pods (RunPodSandbox) and containers
	// (StartContainer), by handler.
	StartDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rtshimd_start_duration_seconds", Help: "Latency of starting pod sandboxes and containers.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	}, []string{"kind", "handler"})
	// PullBytes and PullDuration describe image pulls.
	PullBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rtshimd_image_pull_bytes_total", Help: "Bytes of images pulled (stored size).",
	})
	PullDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rtshimd_image_pull_duration_seconds", Help: "Latency of image pulls.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
	}, []string{"result"})
	// RuntimeFailures counts failed runtime binary calls, by handler and operation.
	RuntimeFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rtshimd_runtime_failures_total", Help: "Failed calls of a handler's OCI runtime binary.",
	}, []string{"handler", "op"})
	// ConfigReloads counts reloads of the config file, by result (success, failure).
	ConfigReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rtshimd_config_reloads_total", Help: "Reloads of the configuration file, by result.",
	}, []string{"result"})
	// NRIRequests counts the events and requests relayed to NRI plugins, by event
	// (RunPodSandbox, CreateContainer, ..., Synchronize, and UpdateContainers for updates a
	// plugin asked for on its own); NRIRequestErrors those that failed.
	NRIRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rtshimd_nri_requests_total", Help: "Events and requests relayed to NRI plugins, by event.",
	}, []string{"event"})
	NRIRequestErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rtshimd_nri_request_errors_total", Help: "Events and requests relayed to NRI plugins that failed, by event.",
	}, []string{"event"})
	// NRIPluginCalls counts the calls of each NRI plugin, by plugin ("<idx>-<name>", as NRI
	// names it) and operation; NRIPluginCallErrors those that failed; NRIPluginCallDuration
	// their latency; NRIPlugins the plugins connected now. They come from the adaptation.
	NRIPluginCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rtshimd_nri_plugin_calls_total", Help: "Calls of NRI plugins, by plugin and operation.",
	}, []string{"plugin", "operation"})
	NRIPluginCallErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rtshimd_nri_plugin_call_errors_total", Help: "Failed calls of NRI plugins, by plugin and operation.",
	}, []string{"plugin", "operation"})
	NRIPluginCallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rtshimd_nri_plugin_call_duration_seconds", Help: "Latency of calls of NRI plugins, by plugin and operation.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	}, []string{"plugin", "operation"})
	NRIPlugins = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rtshimd_nri_plugins", Help: "NRI plugins connected.",
	})
	// ConfigHash is the served config file's hash, as a number (see HashValue).
	ConfigHash = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rtshimd_config_hash", Help: "Hash of the configuration being served (the first 48 bits of its SHA-256).",
	})
)

// HashValue turns a hex SHA-256 into a gauge value: its first 48 bits, which a float64
// holds exactly (as Alertmanager's and Prometheus' config hash gauges do).
func HashValue(hexSum string) float64 {
	if len(hexSum) < 12 {
		return 0
	}
	v, err := strconv.ParseUint(hexSum[:12], 16, 64)
	if err != nil {
		return 0
	}
	return float64(v)
}

// Counts reports, at scrape time, what runs now.
type Counts interface {
	// Running returns running pods and containers by handler, and live monitors.
	Running() (pods, containers map[string]int, monitors int)
}

type gauges struct {
	counts               Counts
	pods, ctrs, monitors *prometheus.Desc
}

func (g *gauges) Describe(ch chan<- *prometheus.Desc) { ch <- g.pods; ch <- g.ctrs; ch <- g.monitors }

func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	pods, ctrs, monitors := g.counts.Running()
	for h, n := range pods {
		ch <- prometheus.MustNewConstMetric(g.pods, prometheus.GaugeValue, float64(n), h)
	}
	for h, n := range ctrs {
		ch <- prometheus.MustNewConstMetric(g.ctrs, prometheus.GaugeValue, float64(n), h)
	}
	ch <- prometheus.MustNewConstMetric(g.monitors, prometheus.GaugeValue, float64(monitors))
}

// Serve registers the metrics and serves them on addr at /metrics until Close. An empty
// addr serves nothing.
func Serve(addr string, counts Counts) (*http.Server, error) {
	if addr == "" {
		return nil, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(RPCDuration, RPCErrors, StartDuration, PullBytes, PullDuration, RuntimeFailures, ConfigReloads, ConfigHash, NRIRequests, NRIRequestErrors,
		NRIPluginCalls, NRIPluginCallErrors, NRIPluginCallDuration, NRIPlugins,
		&gauges{
			counts:   counts,
			pods:     prometheus.NewDesc("rtshimd_running_pods", "Ready pod sandboxes, by handler.", []string{"handler"}, nil),
			ctrs:     prometheus.NewDesc("rtshimd_running_containers", "Running containers, by handler.", []string{"handler"}, nil),
			monitors: prometheus.NewDesc("rtshimd_monitors", "Monitor processes supervising a running container or sandbox container.", nil, nil),
		})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics.addr %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logrus.WithError(err).Error("metrics server stopped")
		}
	}()
	logrus.WithField("addr", ln.Addr().String()).Info("serving metrics")
	return srv, nil
}
