//go:build integration

package integration

import (
	"encoding/json"
	"strconv"
	"testing"
)

func decodeInfo(t *testing.T, info map[string]string) sandboxInfo {
	t.Helper()
	var si sandboxInfo
	if err := json.Unmarshal([]byte(info["info"]), &si); err != nil {
		t.Fatalf("verbose info %q: %v", info["info"], err)
	}
	return si
}

func itoa(i int) string { return strconv.Itoa(i) }
