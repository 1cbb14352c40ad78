// Package idmap finds objects in the daemon's in-memory indexes by full ID or by a unique
// ID prefix, as crictl and containerd accept them.
package idmap

import (
	"fmt"
	"strings"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// Find returns m[id], or the one entry whose ID starts with id. field names the request
// field ("container_id") and kind the object ("container") in errors. The caller holds
// whatever lock guards m.
func Find[T any](m map[string]T, id, field, kind string) (T, error) {
	var zero T
	if id == "" {
		return zero, fmt.Errorf("%s is empty: %w", field, errdefs.ErrInvalidArgument)
	}
	if v, ok := m[id]; ok {
		return v, nil
	}
	var found T
	n := 0
	for k, v := range m {
		if strings.HasPrefix(k, id) {
			found = v
			n++
		}
	}
	switch n {
	case 0:
		return zero, fmt.Errorf("%s %q: %w", kind, id, errdefs.ErrNotFound)
	case 1:
		return found, nil
	}
	return zero, fmt.Errorf("%s %q is ambiguous: it is a prefix of %d %ss' IDs; give more of it: %w", field, id, n, kind, errdefs.ErrInvalidArgument)
}
