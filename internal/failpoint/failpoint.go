//go:build !failpoints

// Package failpoint lets the integration suite make named steps of the daemon fail, to
// prove that a failure there loses and leaks nothing. Only binaries built with the
// `failpoints` tag (the suite's) have them; in every other build Fail is a no-op.
package failpoint

// Enabled says whether this binary has failpoints, for a point that needs set-up to be
// reached at all (a pull watches its progress only then).
const Enabled = false

// Fail returns an error where the test asked the named point to fail; never here.
func Fail(name string) error { return nil }
