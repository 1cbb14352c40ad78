package protocache

import (
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func pod(id string, state runtimeapi.PodSandboxState) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id: id, State: state, Metadata: &runtimeapi.PodSandboxMetadata{Name: "n-" + id, Uid: "u"},
		Labels: map[string]string{"a": "1", "b": "2"}, Annotations: map[string]string{"c": "3"},
	}
}

// What SetRepeated sends decodes as the list a client expects, and an item is built again
// only when its key changes.
func TestItemAndRepeated(t *testing.T) {
	var items [2]Item[runtimeapi.PodSandboxState]
	builds := 0
	get := func(i int, id string, st runtimeapi.PodSandboxState) []byte {
		_, enc := items[i].Get(st, func() proto.Message { builds++; return pod(id, st) })
		return enc
	}
	ready, notReady := runtimeapi.PodSandboxState_SANDBOX_READY, runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	get(0, "p0", ready)
	get(0, "p0", ready)
	if builds != 1 {
		t.Fatalf("%d builds for one key, want 1", builds)
	}
	resp := &runtimeapi.ListPodSandboxResponse{}
	SetRepeated(resp, "items", [][]byte{get(0, "p0", notReady), get(1, "p1", ready)})
	if builds != 3 {
		t.Fatalf("%d builds, want 3 (a changed key builds again)", builds)
	}
	raw, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var got runtimeapi.ListPodSandboxResponse
	if err := proto.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{pod("p0", notReady), pod("p1", ready)}}
	if !proto.Equal(&got, want) {
		t.Errorf("decoded %v, want %v", &got, want)
	}

	// A field of one message: the stats' attributes.
	attrs := &runtimeapi.ContainerAttributes{Id: "c", Labels: map[string]string{"x": "y"}}
	enc, _ := proto.Marshal(attrs)
	st := &runtimeapi.ContainerStats{Cpu: &runtimeapi.CpuUsage{Timestamp: 7}}
	SetField(st, "attributes", enc)
	raw, _ = proto.Marshal(st)
	var gotSt runtimeapi.ContainerStats
	if err := proto.Unmarshal(raw, &gotSt); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(gotSt.Attributes, attrs) || gotSt.Cpu.GetTimestamp() != 7 {
		t.Errorf("decoded %v", &gotSt)
	}
}
