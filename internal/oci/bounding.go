package oci

import (
	"os"
	"strconv"
	"strings"
)

// GrantableCapabilities lists the capabilities in the calling process's bounding set: a
// container can get no others (this node's root, for one, lacks CAP_SYS_RESOURCE).
func GrantableCapabilities() []string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return append([]string(nil), AllCapabilities...)
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			break
		}
		var out []string
		for i, name := range AllCapabilities {
			if mask&(1<<uint(i)) != 0 {
				out = append(out, name)
			}
		}
		return out
	}
	return append([]string(nil), AllCapabilities...)
}
