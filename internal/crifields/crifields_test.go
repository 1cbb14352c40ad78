package crifields

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/cri"
)

var update = flag.Bool("update", false, "rewrite docs/cri-fields.md from the table")

const repo = "../.."

// Every field a request can carry has a decision, with a note; no decision names a field
// that is in no request.
func TestEveryFieldDecided(t *testing.T) {
	fields := Walk(Services())
	if len(fields) < 200 {
		t.Fatalf("walked %d fields: the walk lost its way", len(fields))
	}
	walked := map[string]bool{}
	for _, f := range fields {
		walked[f.Key] = true
		e, ok := Table[f.Key]
		switch {
		case !ok:
			t.Errorf("%s: no decision: add it to internal/crifields/table.go (honoured, refused, or ignored with its reason)", f.Key)
		case e.Decision != Honoured && e.Decision != Refused && e.Decision != Ignored:
			t.Errorf("%s: decision %q", f.Key, e.Decision)
		case len(e.Note) < 10:
			t.Errorf("%s: note %q says too little", f.Key, e.Note)
		}
	}
	for k := range Table {
		if !walked[k] {
			t.Errorf("%s: decided, but no request of cri-api carries it", k)
		}
	}
}

// The daemon's own sources, without tests and this package.
func daemonSources(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(repo, top), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "crifields" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(p)
			b.Write(src)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// A field called honoured is read somewhere in the daemon (its getter or its Go field), and
// a refused one is named in the daemon's text (the error that refuses it).
func TestDecisionsHaveCode(t *testing.T) {
	src := daemonSources(t)
	for _, f := range Walk(Services()) {
		e := Table[f.Key]
		switch e.Decision {
		case Honoured:
			re := regexp.MustCompile(`(\bGet` + f.GoName + `\(|\.` + f.GoName + `\b)`)
			if !re.MatchString(src) {
				t.Errorf("%s is called honoured, but no daemon source reads Get%s() or .%s", f.Key, f.GoName, f.GoName)
			}
		case Refused:
			if e.Note == unimplRPC {
				msg, _, _ := strings.Cut(f.Key, ".")
				checkUnimplemented(t, strings.TrimSuffix(msg, "Request"))
			} else if !strings.Contains(src, f.Proto) {
				t.Errorf("%s is called refused, but no daemon source names %q", f.Key, f.Proto)
			}
		}
	}
}

// checkUnimplemented calls the daemon's CRI server's rpc and wants Unimplemented.
func checkUnimplemented(t *testing.T, rpc string) {
	t.Helper()
	m := reflect.ValueOf(&cri.Server{}).MethodByName(rpc)
	if !m.IsValid() {
		t.Fatalf("the CRI server has no method %s", rpc)
	}
	req := reflect.New(m.Type().In(1).Elem())
	out := m.Call([]reflect.Value{reflect.ValueOf(context.Background()), req})
	err, _ := out[1].Interface().(error)
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("%s answered %v, want Unimplemented: its fields are no longer refused", rpc, err)
	}
}

// A field added to a request message (as a cri-api bump would) is reported undecided.
func TestAddedFieldFails(t *testing.T) {
	fdp := protodesc.ToFileDescriptorProto(runtimeapi.File_staging_src_k8s_io_cri_api_pkg_apis_runtime_v1_api_proto)
	var spec *descriptorpb.DescriptorProto
	for _, m := range fdp.MessageType {
		if m.GetName() == "ImageSpec" {
			spec = m
		}
	}
	if spec == nil {
		t.Fatal("no ImageSpec in api.proto")
	}
	name, num := "future_field", int32(999)
	spec.Field = append(spec.Field, &descriptorpb.FieldDescriptorProto{
		Name: &name, JsonName: &name, Number: &num,
		Type:  descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
		Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
	})
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	var svcs []protoreflect.ServiceDescriptor
	for i := 0; i < fd.Services().Len(); i++ {
		svcs = append(svcs, fd.Services().Get(i))
	}
	var undecided []string
	for _, f := range Walk(svcs) {
		if _, ok := Table[f.Key]; !ok {
			undecided = append(undecided, f.Key)
		}
	}
	if len(undecided) != 1 || undecided[0] != "ImageSpec.future_field" {
		t.Errorf("undecided after adding ImageSpec.future_field: %v", undecided)
	}
}

// docs/cri-fields.md is the table as Markdown renders it.
func TestFieldsDoc(t *testing.T) {
	path := filepath.Join(repo, "docs", "cri-fields.md")
	want := Markdown(Walk(Services()), Table)
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not the table: go test ./internal/crifields -run TestFieldsDoc -update", path)
	}
}
