// Command nnp stands in for the e2e-test-images/nonewprivs program critest runs. It is
// installed setuid root in that image and prints the effective uid it ends up with, so a
// test can tell whether the setuid bit was honoured (no_new_privs false: 0) or not (the
// caller's uid).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
