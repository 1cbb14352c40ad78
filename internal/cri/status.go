package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/handlers"
	"github.com/rtshimd/rtshimd/internal/store"
)

// Status reports the runtime and network conditions and, per ready handler, its
// features; the default handler is listed again under "".
func (s *Server) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	netCond := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	netReady, netWhy := s.Network.Ready()
	if !netReady {
		netCond.Status, netCond.Reason = false, "NetworkPluginNotReady"
		netCond.Message = "CNI: " + netWhy + " (pods get loopback only until a network config exists)"
	}
	// One table for the whole answer: a reload may swap it meanwhile.
	table := s.Handlers.Table()
	list := table.List() // kubelet asks every few seconds: one listing per answer
	rtCond := runtimeReady(list)
	if rtCond.Status && s.Sandboxes != nil && s.Containers != nil {
		if c := recordsReady(s.Sandboxes.Unready(), s.Containers.Unready()); c != nil {
			rtCond = c
		}
	}
	resp := &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			rtCond,
			netCond,
		}},
		// supplemental_groups_policy Merge and Strict are applied in the spec (internal/oci/user.go);
		// mounts' mount_options (noexec, nodev, nosuid) go into the bind mount's options
		// (internal/oci/mounts.go). kubelet sends neither unless the runtime says so. Pods in a
		// user namespace on the node's network run where the handler has user namespaces and
		// recursive read-only mounts (oci.SysMount), and are refused by name elsewhere: the
		// field is the runtime's, not a handler's, as containerd sets it.
		Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true, MountOptions: true, UserNamespacesHostNetwork: true},
	}
	for _, h := range list {
		if !h.Ready {
			continue
		}
		f := &runtimeapi.RuntimeHandlerFeatures{
			RecursiveReadOnlyMounts: h.Features.RecursiveReadOnlyMounts,
			UserNamespaces:          h.Features.UserNamespaces,
		}
		resp.RuntimeHandlers = append(resp.RuntimeHandlers, &runtimeapi.RuntimeHandler{Name: h.Name, Features: f})
		if h.Name == table.Default() {
			resp.RuntimeHandlers = append([]*runtimeapi.RuntimeHandler{{Name: "", Features: f}}, resp.RuntimeHandlers...)
		}
	}
	if req.Verbose {
		served := s.Config
		var reloads any
		if s.Reload != nil {
			served = s.Reload.Config()
			reloads = s.Reload.Status()
		}
		cfg, _ := json.Marshal(served)
		rows, _ := json.Marshal(list)
		rl, _ := json.Marshal(reloads)
		netState, _ := json.Marshal(struct {
			Ready  bool   `json:"ready"`
			Reason string `json:"reason,omitempty"`
		}{netReady, netWhy})
		cidr, _ := json.Marshal(s.PodCIDR.Get())
		nri, _ := json.Marshal(s.NRI.Info())
		// Records recovery set aside as unusable, what of them is kept running, and what
		// was wrong with the journals: an operator's to read and decide on.
		var damage []string
		for _, d := range []string{s.Sandboxes.Damage(), s.Containers.Damage()} {
			if d != "" {
				damage = append(damage, d)
			}
		}
		quarantined, _ := json.Marshal(struct {
			Sandboxes  []store.Quarantined `json:"sandboxes"`
			Containers []store.Quarantined `json:"containers"`
			Journals   []string            `json:"journals,omitempty"`
			Hint       string              `json:"hint,omitempty"`
		}{s.Sandboxes.Quarantined(), s.Containers.Quarantined(), damage, quarantineHint})
		resp.Info = map[string]string{"config": string(cfg), "handlers": string(rows), "network": string(netState), "reload": string(rl), "pod_cidr": string(cidr), "nri": string(nri), "quarantined": string(quarantined)}
		if s.NodeLabels != nil {
			nl, _ := json.Marshal(s.NodeLabels.Status())
			resp.Info["node_labels"] = string(nl)
		}
	}
	return resp, nil
}

// quarantineHint says what an operator can do with what recovery set aside.
const quarantineHint = "kept: still ran at recovery and is left running with its files; `rtshimd quarantine` lists them, `rtshimd quarantine stop ID` stops one, `rtshimd quarantine adopt ID` (daemon stopped) puts a mended record back"

// recordsReady is RuntimeReady false, with why (each manager's, "" for none), while
// objects of a record journal that could not be read are kept: kubelet sees none of them
// and would start every pod again beside its running copy. With the node not ready it
// starts nothing until an operator has decided on them, as containerd, which does not
// start on an unreadable database, leaves a node. nil: nothing such is kept.
func recordsReady(why ...string) *runtimeapi.RuntimeCondition {
	var w []string
	for _, s := range why {
		if s != "" {
			w = append(w, s)
		}
	}
	if len(w) == 0 {
		return nil
	}
	return &runtimeapi.RuntimeCondition{
		Type: runtimeapi.RuntimeReady, Status: false, Reason: "RecordJournalUnreadable",
		Message: strings.Join(w, "; ") + "; kubelet cannot see them and would start them again beside them: stop each (`rtshimd quarantine stop ID`) or, the daemon stopped, adopt its mended record (`rtshimd quarantine adopt ID`); the node is ready once none is kept",
	}
}

// runtimeReady is RuntimeReady: true while some handler can run pods; with none, false
// with each handler's reason (kubelet then marks the node not ready instead of sending
// pods that would all fail).
func runtimeReady(rows []*handlers.Handler) *runtimeapi.RuntimeCondition {
	var why []string
	for _, h := range rows {
		if h.Ready {
			return &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
		}
		why = append(why, fmt.Sprintf("%s: %s", h.Name, h.Reason))
	}
	if len(why) == 0 {
		why = append(why, "no handlers configured")
	}
	return &runtimeapi.RuntimeCondition{
		Type: runtimeapi.RuntimeReady, Status: false, Reason: "NoRuntimeHandlerReady",
		Message: "no runtime handler can run pods: " + strings.Join(why, "; "),
	}
}
