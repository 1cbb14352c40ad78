//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestKubeletRuntimeClass runs pods with runtimeClassName through kubelet registered with a
// real API server (standalone kubelet cannot resolve a RuntimeClass: kubernetes#125561).
// RuntimeClass objects name the daemon's handlers; pods bound to the node by nodeName run
// through the handler their class names, with a projected volume (ConfigMap + downward API,
// which needs kubelet's API client), and a class naming a handler the node cannot run is
// reported to the pod's events with the daemon's reason.
func TestKubeletRuntimeClass(t *testing.T) {
	e := newContainerEnv(t)
	writeNetwork(t, e)
	api := startAPIServer(t)
	k := startKubelet(t, e.d, api.Kubeconfig)
	waitFor(t, 60*time.Second, "the node to register", func() (bool, string) {
		_, err := api.Do(http.MethodGet, "/api/v1/nodes/"+k.NodeName, "")
		return err == nil, fmt.Sprint(err)
	})

	// Written by hand: other names than the handlers' and no node selector, so the node
	// needs no labels (`rtshimd runtimeclasses` is checked in TestRuntimeClassesCommand).
	for _, rc := range []struct{ name, handler, overhead string }{
		{"runc", "runc", ""},
		{"gvisor", "runsc", "\noverhead: {podFixed: {memory: 64Mi, cpu: 100m}}"},
		{"shim", "runc-shim", ""}, // the shim-v2 kind, as a Kata class would be
		{"ghost", "ghost", ""},    // configured in the daemon, its binary missing: not ready
	} {
		api.Create("/apis/node.k8s.io/v1/runtimeclasses", fmt.Sprintf(
			"apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: %s}\nhandler: %s%s\n", rc.name, rc.handler, rc.overhead))
	}
	api.Create("/api/v1/namespaces/default/configmaps",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greeting}\ndata: {greeting: hello-projected}\n")
	pod := func(name, class string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: default}
spec:
  nodeName: %[2]s
  runtimeClassName: %[3]s
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: %[4]s
    command: ["sh", "-c", "cat /etc/cfg/greeting; echo; cat /etc/cfg/name; echo; sleep 3600"]
    volumeMounts: [{name: cfg, mountPath: /etc/cfg}]
  volumes:
  - name: cfg
    projected:
      sources:
      - configMap: {name: greeting}
      - downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}
`, name, k.NodeName, class, e.image)
	}
	for _, p := range []struct{ name, class string }{{"on-runc", "runc"}, {"on-gvisor", "gvisor"}, {"on-shim", "shim"}, {"on-ghost", "ghost"}} {
		api.Create("/api/v1/namespaces/default/pods", pod(p.name, p.class))
	}

	crictl := crictlRunner(t, e.d)
	for _, tt := range []struct{ pod, class, handler string }{{"on-runc", "runc", "runc"}, {"on-gvisor", "gvisor", "runsc"}, {"on-shim", "shim", "runc-shim"}} {
		t.Run(tt.pod, func(t *testing.T) {
			kp := k.WaitPod(tt.pod, 2*time.Minute, "Running and Ready", func(p *kubePod) bool {
				return p.Status.Phase == "Running" && p.condition("Ready") == "True"
			})
			if kp.Spec.RuntimeClassName != tt.class {
				t.Errorf("kubelet's pod has runtimeClassName %q, want %q", kp.Spec.RuntimeClassName, tt.class)
			}
			waitFor(t, 30*time.Second, "the API server to see the pod Running", func() (bool, string) {
				ap, err := api.Pod("default", tt.pod)
				if err != nil {
					return false, err.Error()
				}
				return ap.Status.Phase == "Running", ap.summary()
			})
			// The runtime's view, through crictl: the sandbox runs on the class's handler.
			id := crictl("pods", "-q", "--label", "io.kubernetes.pod.uid="+kp.Metadata.UID, "--state", "Ready")
			var inspect struct {
				Status struct {
					RuntimeHandler string `json:"runtimeHandler"`
				} `json:"status"`
			}
			if err := json.Unmarshal([]byte(crictl("inspectp", id)), &inspect); err != nil {
				t.Fatalf("crictl inspectp %q: %v", id, err)
			}
			if inspect.Status.RuntimeHandler != tt.handler {
				t.Errorf("sandbox %s runs on handler %q, want %q", id, inspect.Status.RuntimeHandler, tt.handler)
			}
			waitFor(t, 30*time.Second, "the projected volume in the container's log", func() (bool, string) {
				out, err := k.ContainerLogs("default", tt.pod, "main", false)
				return err == nil && strings.Contains(out, "hello-projected\n"+tt.pod), fmt.Sprint(out, err)
			})
		})
	}

	t.Run("overhead from the RuntimeClass", func(t *testing.T) {
		b, err := api.Do(http.MethodGet, "/api/v1/namespaces/default/pods/on-gvisor", "")
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Spec struct {
				Overhead map[string]string `json:"overhead"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(b, &p); err != nil || p.Spec.Overhead["memory"] != "64Mi" {
			t.Errorf("on-gvisor overhead %v (%v), want the class's podFixed", p.Spec.Overhead, err)
		}
	})

	t.Run("a class the node cannot run", func(t *testing.T) {
		waitFor(t, 60*time.Second, "a FailedCreatePodSandBox event naming the handler", func() (bool, string) {
			b, err := api.Do(http.MethodGet, "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Don-ghost", "")
			if err != nil {
				return false, err.Error()
			}
			var events struct {
				Items []struct {
					Reason  string `json:"reason"`
					Message string `json:"message"`
				} `json:"items"`
			}
			if err := json.Unmarshal(b, &events); err != nil {
				return false, err.Error()
			}
			for _, ev := range events.Items {
				if ev.Reason == "FailedCreatePodSandBox" && strings.Contains(ev.Message, `runtime handler "ghost" cannot run pods on this node`) {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", events.Items)
		})
		ap, err := api.Pod("default", "on-ghost")
		if err != nil || ap.Status.Phase != "Pending" {
			t.Errorf("on-ghost: %v %v, want Pending", ap, err)
		}
	})

	t.Run("pods deleted through the API", func(t *testing.T) {
		for _, name := range []string{"on-runc", "on-gvisor", "on-shim", "on-ghost"} {
			if _, err := api.Do(http.MethodDelete, "/api/v1/namespaces/default/pods/"+name, ""); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, 90*time.Second, "kubelet to finish the deletions", func() (bool, string) {
			b, err := api.Do(http.MethodGet, "/api/v1/namespaces/default/pods", "")
			if err != nil {
				return false, err.Error()
			}
			var list struct {
				Items []kubePod `json:"items"`
			}
			_ = json.Unmarshal(b, &list)
			return len(list.Items) == 0, fmt.Sprintf("%d pods left", len(list.Items))
		})
		pods, err := e.d.RS.ListPodSandbox(ctxT(t), &runtimeapi.PodSandboxFilter{
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) != 0 {
			t.Errorf("%d sandboxes still ready after the pods were deleted", len(pods))
		}
	})
}
