package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	dockerref "github.com/containers/image/v5/docker/reference"
	cimage "github.com/containers/image/v5/image"
	"github.com/containers/image/v5/manifest"
	"github.com/containers/image/v5/signature"
	"github.com/containers/image/v5/types"
	"github.com/opencontainers/go-digest"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// systemPolicy is where containers/image, CRI-O and podman look for a policy.
const systemPolicy = "/etc/containers/policy.json"

// sigConfig is what decides a pull's signature policy.
type sigConfig struct {
	policy    string // the configured policy; "" = systemPolicy if present, else accept all
	policyDir string // per-namespace policies, <namespace>.json; "" = none
}

// newSigConfig checks cfg's signature settings: an explicit policy must parse (a reload
// with a broken one is refused, the daemon keeps the one it has).
func newSigConfig(cfg config.Image) (sigConfig, error) {
	if cfg.SignaturePolicy != "" {
		if _, err := signature.NewPolicyFromFile(cfg.SignaturePolicy); err != nil {
			return sigConfig{}, fmt.Errorf("image.signature_policy %s: %w", cfg.SignaturePolicy, err)
		}
	}
	if d := cfg.SignaturePolicyDir; d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			return sigConfig{}, fmt.Errorf("image.signature_policy_dir %s: %w", d, err)
		}
	}
	return sigConfig{policy: cfg.SignaturePolicy, policyDir: cfg.SignaturePolicyDir}, nil
}

// namespaceName is a Kubernetes namespace (a DNS label): nothing that could leave the
// policy directory.
var namespaceName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// policyFor is the policy file a pull for a pod in namespace is checked against ("" for
// none: any image is accepted), and the policy itself. A per-namespace file wins; a
// namespace without one gets the node's. A policy that cannot be read fails the pull: it
// never means "accept anything".
func (c sigConfig) policyFor(namespace string) (string, *signature.Policy, error) {
	path := c.policy
	if c.policyDir != "" && namespace != "" {
		if !namespaceName.MatchString(namespace) {
			return "", nil, fmt.Errorf("sandbox_config.metadata.namespace %q is not a namespace name: %w", namespace, errdefs.ErrInvalidArgument)
		}
		p := filepath.Join(c.policyDir, namespace+".json")
		if _, err := os.Stat(p); err == nil {
			path = p
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", nil, fmt.Errorf("signature policy of namespace %s: %w", namespace, err)
		}
	}
	if path == "" {
		if _, err := os.Stat(systemPolicy); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return "", &signature.Policy{Default: []signature.PolicyRequirement{signature.NewPRInsecureAcceptAnything()}}, nil
			}
			return "", nil, fmt.Errorf("signature policy %s: %w", systemPolicy, err)
		}
		path = systemPolicy
	}
	p, err := signature.NewPolicyFromFile(path)
	if err != nil {
		return path, nil, fmt.Errorf("signature policy %s: %w", path, err)
	}
	return path, p, nil
}

// acceptsAnything says whether policy accepts every image a pull can name without
// reading it: every requirement of its default and of its docker scopes (pulls use no
// other transport) is insecureAcceptAnything.
func acceptsAnything(policy *signature.Policy) bool {
	reqs := [][]signature.PolicyRequirement{policy.Default}
	for _, scope := range policy.Transports["docker"] {
		reqs = append(reqs, scope)
	}
	for _, rs := range reqs {
		for _, r := range rs {
			if b, err := json.Marshal(r); err != nil || string(b) != `{"type":"insecureAcceptAnything"}` {
				return false
			}
		}
	}
	return true
}

// verify checks the image ref names against policy, on the registry's own source (which
// serves every kind of signature), and returns the digest of the manifest that passed.
// A registry that stalls ends it after timeout, as it ends a copy.
func (s *Service) verify(ctx context.Context, ref types.ImageReference, sys *types.SystemContext, policy *signature.Policy, timeout time.Duration) (digest.Digest, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	pc, err := signature.NewPolicyContext(policy)
	if err != nil {
		return "", err
	}
	defer func() { _ = pc.Destroy() }()
	src, err := ref.NewImageSource(ctx, sys)
	if err != nil {
		return "", err
	}
	defer src.Close()
	// The manifest and the signatures are read first (and kept by unparsed): a registry
	// that fails then fails the pull as any other, and what the policy says afterwards
	// is its decision alone.
	unparsed := cimage.UnparsedInstance(src, nil)
	b, _, err := unparsed.Manifest(ctx)
	if err != nil {
		return "", err
	}
	if _, err := unparsed.Signatures(ctx); err != nil {
		return "", err
	}
	if _, err := pc.IsRunningImageAllowed(ctx, unparsed); err != nil {
		return "", refusal{err}
	}
	return manifest.Digest(b)
}

// refusal is the policy's decision against an image.
type refusal struct{ error }

func (r refusal) Unwrap() error { return r.error }

// policyError says which image the policy refused, and which policy: a refusal is the
// node's decision (FailedPrecondition), anything else is the pull's error as usual.
func policyError(named dockerref.Named, path string, err error) error {
	var pre refusal
	if errors.As(err, &pre) {
		if path == "" {
			path = "(built in)"
		}
		return fmt.Errorf("image %s refused by the signature policy %s: %v: %w", named, path, pre.error, errdefs.ErrFailedPrecondition)
	}
	return pullError(named, err)
}
