//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Env names the points to fail and how many times: "container-cleanup=2,sandbox-cleanup=1".
const Env = "RTSHIMD_FAILPOINTS"

var (
	once sync.Once
	mu   sync.Mutex
	left map[string]int
)

// Fail returns an error the first n times the named point is reached, for the n that
// RTSHIMD_FAILPOINTS gives it.
func Fail(name string) error {
	once.Do(func() {
		left = map[string]int{}
		for _, kv := range strings.Split(os.Getenv(Env), ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if n, err := strconv.Atoi(v); ok && err == nil {
				left[k] = n
			}
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if left[name] <= 0 {
		return nil
	}
	left[name]--
	return fmt.Errorf("failpoint %s (%d more)", name, left[name])
}
