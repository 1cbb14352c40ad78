//go:build integration

package integration

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// kubelet's /metrics/cadvisor names rtshimd's containers by pod, namespace, container and
// image when kubelet takes its metrics from the CRI (the PodAndContainerStatsFromCRI gate,
// which serves that endpoint from ListPodSandboxMetrics): the supported way, since a
// default kubelet's cAdvisor knows only containerd's and CRI-O's APIs and leaves
// rtshimd's containers unnamed there.
func TestKubeletCadvisorMetricsFromCRI(t *testing.T) {
	e := newContainerEnv(t)
	writeNetwork(t, e)
	k := startKubelet(t, e.d, "", "featureGates: {PodAndContainerStatsFromCRI: true}")
	k.AddStaticPod("metrics.yaml", onePod("metrics", e.image, "", "", "sleep", "3600"))
	pod := "metrics-" + k.NodeName // a static pod's name carries its node's
	k.WaitPod(pod, 2*time.Minute, "Running", func(p *kubePod) bool { return p.Status.Phase == "Running" })
	image := regexp.MustCompile(`image="[^"]+"`)
	waitFor(t, 90*time.Second, "the container's series in kubelet's /metrics/cadvisor", func() (bool, string) {
		b, err := k.get("/metrics/cadvisor")
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, "container_memory_working_set_bytes{") {
				continue
			}
			names = append(names, l)
			if strings.Contains(l, `container="main"`) && strings.Contains(l, fmt.Sprintf(`pod=%q`, pod)) &&
				strings.Contains(l, `namespace="default"`) && image.MatchString(l) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("working-set series: %v", names)
	})
	k.RemoveStaticPod("metrics.yaml")
	waitFor(t, time.Minute, "the pod to go", func() (bool, string) {
		pods, err := k.Pods()
		return err == nil && pods[pod] == nil, fmt.Sprint(err)
	})
}
