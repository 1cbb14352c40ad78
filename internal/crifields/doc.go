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
	b.WriteString("Fields of one message with the same decision and reason share a row (`.*`: all of them).\n\n")
	perMsg := map[string]int{}
	for _, f := range fields {
		m, _ := split(f.Key)
		perMsg[m]++
	}
	b.WriteString("| fields | decision | what rtshimd does |\n| --- | --- | --- |\n")
	for i := 0; i < len(fields); {
		e := table[fields[i].Key]
		msg, name := split(fields[i].Key)
		names := []string{name}
		j := i + 1
		for ; j < len(fields); j++ {
			m, n := split(fields[j].Key)
			if m != msg || table[fields[j].Key] != e {
				break
			}
			names = append(names, n)
		}
		key := msg + "." + names[0]
		switch {
		case len(names) > 1 && len(names) == perMsg[msg]:
			key = msg + ".*"
		case len(names) > 1:
			key = msg + ".{" + strings.Join(names, ",") + "}"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", key, e.Decision, strings.ReplaceAll(e.Note, "|", "\\|"))
		i = j
	}
	return b.String()
}

// split is a field's key as its message and its name.
func split(key string) (msg, name string) {
	i := strings.LastIndex(key, ".")
	return key[:i], key[i+1:]
}
