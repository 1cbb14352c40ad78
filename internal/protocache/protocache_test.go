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

// With Plain on, what SetRepeated and SetField set is the message's own field, as a reader
// of the server's Go types (an interceptor) sees it, and the wire bytes are the same.
func TestPlain(t *testing.T) {
	encode := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	p0, p1 := pod("p0", runtimeapi.PodSandboxState_SANDBOX_READY), pod("p1", runtimeapi.PodSandboxState_SANDBOX_NOTREADY)
	attrs := &runtimeapi.ContainerAttributes{Id: "c0", Labels: map[string]string{"x": "y"}}
	build := func() (*runtimeapi.ListPodSandboxResponse, *runtimeapi.ContainerStats) {
		resp := &runtimeapi.ListPodSandboxResponse{}
		SetRepeated(resp, "items", [][]byte{encode(p0), encode(p1)})
		st := &runtimeapi.ContainerStats{}
		SetField(st, "attributes", encode(attrs))
		return resp, st
	}

	kept, keptSt := build()
	if len(kept.Items) != 0 || keptSt.Attributes != nil {
		t.Fatalf("kept encoding: the fields themselves are set: %d items, attributes %v", len(kept.Items), keptSt.Attributes)
	}
	Plain(true)
	defer Plain(false)
	plainResp, plainSt := build()
	if len(plainResp.Items) != 2 || !proto.Equal(plainResp.Items[1], p1) || !proto.Equal(plainSt.Attributes, attrs) {
		t.Fatalf("plain: items %v, attributes %v", plainResp.Items, plainSt.Attributes)
	}
	if len(plainResp.ProtoReflect().GetUnknown()) != 0 || len(plainSt.ProtoReflect().GetUnknown()) != 0 {
		t.Error("plain: unknown fields left")
	}
	for _, pair := range [][2]proto.Message{{kept, plainResp}, {keptSt, plainSt}} {
		a, b := encode(pair[0]), encode(pair[1])
		got, want := pair[0].ProtoReflect().New().Interface(), pair[1].ProtoReflect().New().Interface()
		if proto.Unmarshal(a, got) != nil || proto.Unmarshal(b, want) != nil || !proto.Equal(got, want) {
			t.Errorf("kept and plain answers decode differently: %v / %v", got, want)
		}
	}
}
