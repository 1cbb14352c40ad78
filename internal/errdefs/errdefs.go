// Package errdefs holds the error kinds the managers return so that internal/cri can map them
// to gRPC codes without string matching. Wrap them with context: fmt.Errorf("...: %w", ErrNotFound).
package errdefs

import "errors"

var (
	ErrNotFound           = errors.New("not found")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrAlreadyExists      = errors.New("already exists")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrUnavailable        = errors.New("unavailable")
	// ErrNotImplemented: the handler's kind of runtime cannot do what was asked at all.
	ErrNotImplemented = errors.New("not implemented")
)
