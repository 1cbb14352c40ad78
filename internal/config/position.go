package config

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// sources are the files of a config, main first: an error about a key names the last of
// them that sets it (the one whose value counts), else the main file.
type sources []positions

func (s sources) errf(key, format string, args ...any) error {
	// A drop-in is named only where it sets the key itself (or its table): one that sets
	// another key of [image] says nothing of image.pull_progress_timeout.
	for i := len(s) - 1; i > 0; i-- {
		if s[i].line(key) > 0 {
			return s[i].errf(key, format, args...)
		}
	}
	return s[0].errf(key, format, args...)
}

// positions finds the line where a key is defined, for errors the decoder does not
// position itself (validation of values it accepted).
type positions struct {
	name string
	src  []byte
}

func (p positions) errf(key, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	// A key inside an inline table has no line of its own: use its parent's.
	for k := key; k != ""; {
		if line := p.line(k); line > 0 {
			return fmt.Errorf("%s:%d: %s", p.name, line, msg)
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return fmt.Errorf("%s: %s", p.name, msg)
}

// line returns the 1-based line that defines the dotted key (a table header or a
// "key = value" line inside the right table), or 0 if it cannot be found.
func (p positions) line(key string) int {
	if key == "" {
		return 0
	}
	table := ""
	best := 0
	sc := bufio.NewScanner(bytes.NewReader(p.src))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		if strings.HasPrefix(l, "[") {
			table = unquote(strings.Trim(strings.SplitN(l, "]", 2)[0], "[ "))
			if table == key && best == 0 {
				best = n
			}
			continue
		}
		k, _, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		full := unquote(strings.TrimSpace(k))
		if table != "" {
			full = table + "." + full
		}
		if full == key {
			return n
		}
		// A key inside the table of the one asked for: the table header is close enough.
		if best == 0 && strings.HasPrefix(full, key+".") {
			best = n
		}
	}
	return best
}

func unquote(s string) string {
	parts := strings.Split(s, ".")
	for i, part := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(part), `"'`)
	}
	return strings.Join(parts, ".")
}
