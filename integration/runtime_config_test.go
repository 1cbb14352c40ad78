//go:build integration

package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdateRuntimeConfig keeps kubelet's pod CIDR: Status verbose reports it, a bad one is
// refused naming the field and the value, an empty one changes nothing, and it survives
// a restart of the daemon (even a kill).
func TestUpdateRuntimeConfig(t *testing.T) {
	d := newDaemon(t)
	ctx := ctxT(t)
	podCIDR := func() string {
		t.Helper()
		resp, err := d.RS.Status(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		raw, ok := resp.Info["pod_cidr"]
		if !ok {
			t.Fatalf("Status verbose has no pod_cidr: %v", resp.Info)
		}
		var v string
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			t.Fatalf("pod_cidr %q is not a JSON string: %v", raw, err)
		}
		return v
	}
	set := func(cidr string) error {
		return d.RS.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}})
	}
	if got := podCIDR(); got != "" {
		t.Errorf("pod_cidr before any UpdateRuntimeConfig: %q", got)
	}
	const dual = "10.244.1.0/24,fd00:10:244:1::/64"
	if err := set(dual); err != nil {
		t.Fatal(err)
	}
	if got := podCIDR(); got != dual {
		t.Errorf("pod_cidr %q, want %q", got, dual)
	}
	if !strings.Contains(d.Log(), "pod CIDR set") {
		t.Error("setting the pod CIDR was not logged")
	}
	for _, bad := range []string{"10.244.1.0/33", "10.244.1.0", "10.0.0.0/8,10.1.0.0/16"} {
		err := set(bad)
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(msg, "runtime_config.network_config.pod_cidr") || !strings.Contains(msg, bad) {
			t.Errorf("pod CIDR %q: %v, want InvalidArgument naming the field and the value", bad, err)
		}
	}
	// kubelet sends "" while the node has no pod CIDR: accepted, nothing kept.
	if err := set(""); err != nil {
		t.Errorf("empty pod CIDR: %v", err)
	}
	if got := podCIDR(); got != dual {
		t.Errorf("after a bad and an empty one, pod_cidr %q, want %q still", got, dual)
	}

	const single = "10.88.0.0/16"
	if err := set(single); err != nil {
		t.Fatal(err)
	}
	d.Restart(true)
	if got := podCIDR(); got != single {
		t.Errorf("after a restart, pod_cidr %q, want %q", got, single)
	}
}
