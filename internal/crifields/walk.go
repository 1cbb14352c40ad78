// Package crifields holds what rtshimd does with each field of the CRI requests it serves
// (honoured, refused by name, or ignored with a reason), and walks the pinned cri-api's
// request messages so that a field nobody decided on fails a test instead of being dropped
// silently when cri-api is bumped.
package crifields

import (
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Field is one field of a message a CRI request carries, directly or nested.
type Field struct {
	// Key is Message.field, the message's name without its package (ImageSpec.image).
	Key string
	// Proto is the field's name in api.proto, GoName its name in the generated Go.
	Proto, GoName string
	// Message is a message-typed field's message (a map's value message), else "".
	Message string
}

// Services are the CRI services rtshimd serves, from the pinned cri-api.
func Services() []protoreflect.ServiceDescriptor {
	svcs := runtimeapi.File_staging_src_k8s_io_cri_api_pkg_apis_runtime_v1_api_proto.Services()
	out := make([]protoreflect.ServiceDescriptor, 0, svcs.Len())
	for i := 0; i < svcs.Len(); i++ {
		out = append(out, svcs.Get(i))
	}
	return out
}

// Walk returns every field reachable from the request message of a method of svcs, each
// once (messages shared by several requests, LinuxContainerResources or ImageSpec, are one
// set of fields), sorted by key.
func Walk(svcs []protoreflect.ServiceDescriptor) []Field {
	seen := map[protoreflect.FullName]bool{}
	var out []Field
	var visit func(md protoreflect.MessageDescriptor)
	visit = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			f := Field{Key: string(md.Name()) + "." + string(fd.Name()), Proto: string(fd.Name()), GoName: goName(fd)}
			sub := fd.Message()
			if fd.IsMap() {
				sub = fd.MapValue().Message()
			}
			// Well-known and wrapper types are leaves: their one value is the field's.
			if sub != nil && strings.HasPrefix(string(sub.FullName()), "runtime.v1.") {
				f.Message = string(sub.Name())
				visit(sub)
			}
			out = append(out, f)
		}
	}
	for _, s := range svcs {
		methods := s.Methods()
		for i := 0; i < methods.Len(); i++ {
			visit(methods.Get(i).Input())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// goName is the generated Go struct field's name: protoc-gen-go's CamelCase of the proto
// name (a oneof's members have their own wrapper types; CRI's requests have none).
func goName(fd protoreflect.FieldDescriptor) string {
	var b strings.Builder
	up := true
	for _, r := range string(fd.Name()) {
		switch {
		case r == '_':
			up = true
		case up && r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			up = false
		default:
			b.WriteRune(r)
			up = r >= '0' && r <= '9'
		}
	}
	return b.String()
}
