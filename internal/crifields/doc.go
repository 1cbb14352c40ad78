package crifields

import (
	"fmt"
	"strings"
)

// Markdown renders the table as docs/cri-fields.md (TestFieldsDoc keeps the file in step).
func Markdown(fields []Field, table map[string]Entry) string {
	var b strings.Builder
	count := map[Decision]int{}
	for _, f := range fields {
		count[table[f.Key].Decision]++
	}
	b.WriteString("# CRI request fields\n\n")
	b.WriteString("<!-- Generated from internal/crifields/table.go: go test ./internal/crifields -run TestFieldsDoc -update -->\n\n")
	fmt.Fprintf(&b, "What rtshimd does with each of the %d fields that the requests of the pinned cri-api's\n", len(fields))
	b.WriteString("RuntimeService and ImageService carry, directly or in a nested message (each message once):\n")
	fmt.Fprintf(&b, "%d honoured (a value rtshimd cannot give is refused, naming the field), %d refused whatever\n", count[Honoured], count[Refused])
	fmt.Fprintf(&b, "their value (their RPC answers `Unimplemented`), %d ignored, each with its reason. A field added to cri-api fails\n", count[Ignored])
	b.WriteString("`TestEveryFieldDecided` until it has a row here. [cri-support.md](cri-support.md) says how the\n")
	b.WriteString("areas behave on this machine and on other nodes.\n\n")
	b.WriteString("| field | decision | what rtshimd does |\n| --- | --- | --- |\n")
	for _, f := range fields {
		e := table[f.Key]
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.Key, e.Decision, strings.ReplaceAll(e.Note, "|", "\\|"))
	}
	return b.String()
}
