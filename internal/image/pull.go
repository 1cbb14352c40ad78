package image

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/containers/image/v5/copy"
	"github.com/containers/image/v5/docker"
	dockerref "github.com/containers/image/v5/docker/reference"
	"github.com/containers/image/v5/manifest"
	"github.com/containers/image/v5/signature"
	istorage "github.com/containers/image/v5/storage"
	"github.com/containers/image/v5/types"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/failpoint"
)

// Pull fetches ref into the store and returns the image ID ("sha256:..."), for a pod in
// namespace ("" when the request names no pod), whose signature policy it must pass.
// Identical concurrent pulls (same reference, credentials, their registry and policy) do
// the work once. The credentials go only to the registry they belong to
// (scopedAuth.apply).
func (s *Service) Pull(ctx context.Context, ref string, auth Auth, namespace string) (string, error) {
	named, err := normalize(ref)
	if err != nil {
		return "", err
	}
	creds, err := scope(auth, named)
	if err != nil {
		return "", err
	}
	sys, sig, release := s.pullContext()
	defer release()
	policyPath, policy, err := sig.policyFor(namespace)
	if err != nil {
		return "", fmt.Errorf("pull %s: %w", named, err)
	}
	v, err, shared := s.pulls.Do(named.String()+"\x00"+creds.key()+"\x00"+policyPath, func() (any, error) {
		// Detached from any one caller: a kubelet retry after a timeout joins this pull.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Minute)
		defer cancel()
		// Written here, so the file lives exactly as long as the pull that reads it.
		done, err := creds.apply(&sys, filepath.Join(s.opts.RunRoot, "auth"))
		defer done()
		if err != nil {
			return "", err
		}
		return s.pull(pctx, named, &sys, policyPath, policy)
	})
	if shared {
		logrus.WithField("image", named.String()).Debug("joined a pull already under way")
	}
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

func (s *Service) pull(ctx context.Context, named dockerref.Named, sys *types.SystemContext, policyPath string, policy *signature.Policy) (string, error) {
	s.beginPull()
	defer func() {
		s.endPull()
		s.fsCache.invalidate()
	}()
	log := logrus.WithField("image", named.String())
	start := time.Now()
	srcRef, err := docker.NewReference(named)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %v: %w", named, err, errdefs.ErrInvalidArgument)
	}
	destRef, err := istorage.Transport.NewStoreReference(s.store, named, "")
	if err != nil {
		return "", fmt.Errorf("store reference for %q: %w", named, err)
	}
	// The copy reads its source through the progress watch, which offers copy.Image only
	// the public ImageSource: signatures other than simple signing ones (sigstore's) are
	// lost there. So a policy that asks for anything is checked first on the registry's
	// own source, and the copy then takes the manifest it passed, by digest.
	if !acceptsAnything(policy) {
		d, err := s.verify(ctx, srcRef, sys, policy, s.opts.Config.PullProgressTimeout.Duration)
		if err != nil {
			return "", policyError(named, policyPath, err)
		}
		pinned, err := dockerref.WithDigest(dockerref.TrimNamed(named), d)
		if err == nil {
			srcRef, err = docker.NewReference(pinned)
		}
		if err != nil {
			return "", fmt.Errorf("image reference %s@%s: %w", named, d, err)
		}
		log = log.WithField("signature_policy", policyPath)
	}
	policyCtx, err := signature.NewPolicyContext(&signature.Policy{Default: []signature.PolicyRequirement{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		return "", err
	}
	defer func() { _ = policyCtx.Destroy() }()
	opts := &copy.Options{
		SourceCtx:            sys,
		DestinationCtx:       sys,
		MaxParallelDownloads: uint(s.opts.Config.MaxParallelDownloads),
	}
	// A registry that stops sending ends the pull after image.pull_progress_timeout, not
	// at the 30-minute bound (audit 2026-11-26, N8).
	copyCtx, watchedSrc, stopProgress := watchProgress(ctx, srcRef, s.opts.Config.PullProgressTimeout.Duration)
	copyCtx, pointErr, stopWatch := watchBlobs(copyCtx, opts)
	manifestBytes, err := copy.Image(copyCtx, policyCtx, destRef, watchedSrc, opts)
	stopWatch()
	if stall := stopProgress(); stall != nil && err != nil {
		err = stall // the copy's own error is the cancel's
	}
	if perr := pointErr(); perr != nil {
		if err == nil {
			// The copy had no more I/O to notice the cancel by: what a pull broken at the
			// point leaves is its layers without the image.
			if img, ierr := s.store.Image(named.String()); ierr == nil {
				_ = s.store.RemoveNames(img.ID, []string{named.String()})
			}
		}
		err = perr
	}
	if err == nil {
		err = failpoint.Fail("pull-image/stored")
	}
	if err != nil {
		s.gcLayers()
		return "", pullError(named, err)
	}
	img, err := s.store.Image(named.String())
	if err != nil {
		return "", fmt.Errorf("pulled %s but cannot find it in the store: %w", named, err)
	}
	// Per reference, before the pull answers: a create that names it right after asks.
	if err := s.recordPull(img.ID, named, manifestBytes); err != nil {
		return "", fmt.Errorf("pull %s: %w", named, err)
	}
	// After the record, one of its big-data items. Before the pull answers: Status never
	// reads layer records.
	s.refreshSize(img.ID)
	mdigest, _ := manifest.Digest(manifestBytes)
	log.WithFields(logrus.Fields{"id": img.ID, "manifest": mdigest, "duration": time.Since(start)}).Info("image pulled")
	return "sha256:" + img.ID, nil
}

// pullError says which registry, which reference and why.
func pullError(named dockerref.Named, err error) error {
	registry := dockerref.Domain(named)
	msg := err.Error()
	low := strings.ToLower(msg)
	why, kind := "", error(nil)
	var stall *stallError
	switch {
	case errors.As(err, &stall):
		why = "the transfer stalled"
		kind = context.DeadlineExceeded
	// Most specific first; never match bare status numbers (a port can contain "401").
	case strings.Contains(low, "no image found in") || strings.Contains(low, "choosing image instance"):
		why = "no image for this node's platform"
		kind = errdefs.ErrNotFound
	case strings.Contains(low, "unauthorized") || strings.Contains(low, "authentication required") || strings.Contains(low, "status 401"):
		why = "unauthorized (missing or wrong credentials)"
		kind = errdefs.ErrFailedPrecondition
	case strings.Contains(low, "manifest unknown") || strings.Contains(low, "name unknown") || strings.Contains(low, "not found") || strings.Contains(low, "status 404"):
		why = "not found"
		kind = errdefs.ErrNotFound
	case strings.Contains(low, "connection refused") || strings.Contains(low, "no such host") || strings.Contains(low, "i/o timeout") ||
		strings.Contains(low, "unexpected eof") || strings.Contains(low, "connection reset") || strings.Contains(low, "server gave http response to https client") ||
		strings.Contains(low, "tls"):
		why = "registry unreachable or the transfer broke"
		kind = errdefs.ErrUnavailable
	case strings.Contains(low, "blocked"):
		why = "registry is blocked by the registry configuration"
		kind = errdefs.ErrFailedPrecondition
	case errors.Is(err, context.DeadlineExceeded):
		why = "timed out"
		kind = context.DeadlineExceeded
	default:
		why = "failed"
	}
	if kind == nil {
		return fmt.Errorf("pull %s from registry %s: %s: %v", named, registry, why, err)
	}
	return fmt.Errorf("pull %s from registry %s: %s: %v: %w", named, registry, why, err, kind)
}

// watchBlobs is the failpoint in the middle of a pull, "pull-image/blob-done": where the
// first blob is stored and the rest are not, the copy is cancelled (or the daemon killed).
// Without failpoints it watches nothing.
func watchBlobs(ctx context.Context, opts *copy.Options) (context.Context, func() error, func()) {
	if !failpoint.Enabled {
		return ctx, func() error { return nil }, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	progress := make(chan types.ProgressProperties)
	opts.Progress, opts.ProgressInterval = progress, time.Hour
	done := make(chan struct{})
	var pointErr error
	go func() {
		defer close(done)
		for p := range progress {
			if p.Event == types.ProgressEventDone && pointErr == nil {
				if pointErr = failpoint.Fail("pull-image/blob-done"); pointErr != nil {
					cancel(pointErr)
				}
			}
		}
	}()
	return ctx, func() error { <-done; return pointErr }, func() { close(progress); cancel(nil) }
}
