//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containers/image/v5/copy"
	"github.com/containers/image/v5/docker"
	"github.com/containers/image/v5/signature"
	"github.com/containers/image/v5/signature/signer"
	"github.com/containers/image/v5/signature/sigstore"
	"github.com/containers/image/v5/types"
	"golang.org/x/crypto/openpgp"       //nolint:staticcheck // containers/image's openpgp build verifies with it
	"golang.org/x/crypto/openpgp/armor" //nolint:staticcheck
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// Every pull is checked against image.signature_policy (containers-policy.json(5)), with
// the signatures image.registries_d says where to find. Keys are made here: a GPG key
// signs simple-signing signatures kept in a lookaside directory, a sigstore key signs
// attachments pushed to the test registry. A signed image is pulled; an unsigned one, one
// whose signature is for another manifest, and one signed by another key are refused
// with an error naming the image and the policy, and leave nothing in the store. A pod's
// namespace picks its own policy from image.signature_policy_dir, and the policy file
// is read at each pull.
func TestSignaturePolicy(t *testing.T) {
	reg := startRegistry(t, nil)
	dir := t.TempDir()
	plain := ImageSpec{Layers: []Layer{busyboxLayer(t)}}
	other := ImageSpec{Layers: []Layer{busyboxLayer(t), {Files: []File{{Path: "/other", Content: "other"}}}}}

	// GPG: simple signing signatures in a lookaside directory.
	key, pubring := gpgKey(t, dir, "trusted")
	stranger, _ := gpgKey(t, dir, "stranger")
	lookaside := filepath.Join(dir, "lookaside")
	signedDigest, _ := reg.Push(t, "gpg/signed", "1", plain, nil)
	writeSimpleSignature(t, lookaside, key, reg.Ref("gpg/signed", "1"), "gpg/signed", signedDigest, signedDigest)
	reg.Push(t, "gpg/unsigned", "1", plain, nil)
	// The registry now serves another manifest under the tag, with the first one's
	// signature copied to it: the signature names the manifest it was made for.
	swapped, _ := reg.Push(t, "gpg/swapped", "1", other, nil)
	writeSimpleSignature(t, lookaside, key, reg.Ref("gpg/swapped", "1"), "gpg/swapped", signedDigest, swapped)
	strangerDigest, _ := reg.Push(t, "gpg/stranger", "1", plain, nil)
	writeSimpleSignature(t, lookaside, stranger, reg.Ref("gpg/stranger", "1"), "gpg/stranger", strangerDigest, strangerDigest)

	// sigstore: attachments in the registry, made by containers/image's own signer.
	registriesD := filepath.Join(dir, "registries.d")
	if err := os.MkdirAll(registriesD, 0o755); err != nil {
		t.Fatal(err)
	}
	regConf := fmt.Sprintf("docker:\n  %s/gpg:\n    lookaside: file://%s\n  %s/sigstore:\n    use-sigstore-attachments: true\n", reg.Addr, lookaside, reg.Addr)
	if err := os.WriteFile(filepath.Join(registriesD, "rtshimd-test.yaml"), []byte(regConf), 0o644); err != nil {
		t.Fatal(err)
	}
	sigstorePub := sigstoreSign(t, dir, reg, registriesD, plain, "sigstore/signed")
	reg.Push(t, "sigstore/unsigned", "1", plain, nil)
	reg.Push(t, "open/app", "1", plain, nil)

	policyPath := filepath.Join(dir, "policy.json")
	writePolicy := func(def string) {
		policy := fmt.Sprintf(`{"default": [{"type": %q}], "transports": {"docker": {
			%q: [{"type": "signedBy", "keyType": "GPGKeys", "keyPath": %q}],
			%q: [{"type": "sigstoreSigned", "keyPath": %q, "signedIdentity": {"type": "matchRepository"}}]}}}`,
			def, reg.Addr+"/gpg", pubring, reg.Addr+"/sigstore", sigstorePub)
		if err := os.WriteFile(policyPath, []byte(policy), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writePolicy("insecureAcceptAnything")
	nsPolicies := filepath.Join(dir, "policies")
	if err := os.MkdirAll(nsPolicies, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nsPolicies, "strict.json"), []byte(`{"default": [{"type": "reject"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, withRegistries(reg.Addr), withConfig(func(_ *Daemon, c *config.Config) {
		c.Image.SignaturePolicy, c.Image.SignaturePolicyDir, c.Image.RegistriesD = policyPath, nsPolicies, registriesD
	}))
	ctx := ctxT(t)
	inNamespace := func(ns string) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Uid: "u", Namespace: ns}}
	}
	pull := func(repo string, pod *runtimeapi.PodSandboxConfig) error {
		_, err := d.IS.PullImage(ctx, imgSpec(reg.Ref(repo, "1")), nil, pod)
		return err
	}
	for _, tc := range []struct {
		repo, ns string
		want     string // "" accepted; else what the refusal says
	}{
		{"gpg/signed", "", ""},
		{"gpg/unsigned", "", "signature"},
		{"gpg/swapped", "", "digest"},
		{"gpg/stranger", "", "key"},
		{"sigstore/signed", "", ""},
		{"sigstore/unsigned", "", "signature"},
		{"open/app", "", ""},
		{"open/app", "default", ""},
		{"open/app", "strict", "rejected"},
	} {
		var pod *runtimeapi.PodSandboxConfig
		if tc.ns != "" {
			pod = inNamespace(tc.ns)
		}
		err := pull(tc.repo, pod)
		name := tc.repo + " in namespace " + tc.ns
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		policy := policyPath
		if tc.ns != "" {
			policy = filepath.Join(nsPolicies, tc.ns+".json")
		}
		msg := status.Convert(err).Message()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(msg, reg.Ref(tc.repo, "1")) || !strings.Contains(msg, policy) || !strings.Contains(strings.ToLower(msg), tc.want) {
			t.Errorf("%s: got %v, want FailedPrecondition naming the image, %s and %q", name, err, policy, tc.want)
		}
		// (open/app was pulled before for another namespace: that one is kept.)
		if st, err := d.IS.ImageStatus(ctx, imgSpec(reg.Ref(tc.repo, "1")), false); err != nil || (st.GetImage() != nil && tc.repo != "open/app") {
			t.Errorf("%s: refused, yet the image is stored (%v)", name, err)
		}
	}
	if err := pull("open/app", inNamespace("../strict")); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "sandbox_config.metadata.namespace") {
		t.Errorf("a namespace that is not a name: %v, want InvalidArgument naming the field", err)
	}
	// Only what passed is stored: gpg/signed, sigstore/signed and open/app.
	imgs, err := d.IS.ListImages(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, im := range imgs {
		tags = append(tags, im.RepoTags...)
	}
	if len(tags) != 3 {
		t.Errorf("stored tags %v, want the 3 accepted images", tags)
	}
	for _, repo := range []string{"gpg/unsigned", "gpg/swapped", "gpg/stranger", "sigstore/unsigned"} {
		for _, tag := range tags {
			if strings.Contains(tag, repo) {
				t.Errorf("a refused image is listed: %s", tag)
			}
		}
	}
	// The policy is read at each pull: an edit applies to the next one.
	reg.Push(t, "open/later", "1", other, nil)
	writePolicy("reject")
	if err := pull("open/later", nil); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("after the policy's default became reject: %v, want FailedPrecondition", err)
	}
	if err := pull("gpg/signed", nil); err != nil {
		t.Errorf("a signed image under the edited policy: %v", err)
	}
	// A policy that does not parse fails the pull (never "accept anything").
	if err := os.WriteFile(policyPath, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pull("open/later", nil); err == nil || !strings.Contains(err.Error(), policyPath) {
		t.Errorf("a broken policy file: %v, want an error naming it", err)
	}
}

// gpgKey makes a GPG key and writes its armored public key to <dir>/<name>.pub.
func gpgKey(t *testing.T, dir, name string) (*openpgp.Entity, string) {
	t.Helper()
	e, err := openpgp.NewEntity("rtshimd test "+name, "", name+"@rtshimd.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The key says it signs with SHA-256 (openpgp.Sign otherwise wants RIPEMD-160, which
	// is not built in), in a self-signature made again over that preference.
	for _, id := range e.Identities {
		id.SelfSignature.PreferredHash = []uint8{8} // SHA-256 (RFC 4880 9.4)
		if err := id.SelfSignature.SignUserId(id.UserId.Id, e.PrimaryKey, e.PrivateKey, nil); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err == nil {
		err = e.Serialize(w)
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".pub")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return e, path
}

// writeSimpleSignature signs, with key, a simple-signing payload that says ref is the
// manifest signedDigest, and stores it in the lookaside directory as the first signature
// of repo's manifest at digest (containers-registries.d(5)).
func writeSimpleSignature(t *testing.T, lookaside string, key *openpgp.Entity, ref, repo, signedDigest, digest string) {
	t.Helper()
	payload, err := json.Marshal(map[string]any{
		"critical": map[string]any{
			"type":     "atomic container signature",
			"image":    map[string]string{"docker-manifest-digest": signedDigest},
			"identity": map[string]string{"docker-reference": ref},
		},
		"optional": map[string]any{"creator": "rtshimd integration test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var sig bytes.Buffer
	w, err := openpgp.Sign(&sig, key, nil, nil)
	if err == nil {
		_, err = w.Write(payload)
	}
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	algo, hex, _ := strings.Cut(digest, ":")
	p := filepath.Join(lookaside, repo+"@"+algo+"="+hex, "signature-1")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, sig.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sigstoreSign pushes img to repo:1 through containers/image with a sigstore signer of a
// key made here (the signature goes to the registry as an attachment) and returns the
// public key's path.
func sigstoreSign(t *testing.T, dir string, reg *Registry, registriesD string, img ImageSpec, repo string) string {
	t.Helper()
	pass := []byte("rtshimd-test")
	kp, err := sigstore.GenerateKeyPair(pass)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub := filepath.Join(dir, "sigstore.key"), filepath.Join(dir, "sigstore.pub")
	if err := os.WriteFile(priv, kp.PrivateKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, kp.PublicKey, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := sigstore.NewSigner(sigstore.WithPrivateKeyFile(priv, pass))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reg.Push(t, repo, "unsigned-source", img, nil)
	srcRef, err := docker.ParseReference("//" + reg.Ref(repo, "unsigned-source"))
	if err != nil {
		t.Fatal(err)
	}
	destRef, err := docker.ParseReference("//" + reg.Ref(repo, "1"))
	if err != nil {
		t.Fatal(err)
	}
	emptyConf := filepath.Join(dir, "registries.conf")
	if err := os.WriteFile(emptyConf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sys := &types.SystemContext{DockerInsecureSkipTLSVerify: types.OptionalBoolTrue, RegistriesDirPath: registriesD, SystemRegistriesConfPath: emptyConf}
	pc, err := signature.NewPolicyContext(&signature.Policy{Default: []signature.PolicyRequirement{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Destroy() }()
	if _, err := copy.Image(ctxT(t), pc, destRef, srcRef, &copy.Options{Signers: []*signer.Signer{s}, SourceCtx: sys, DestinationCtx: sys}); err != nil {
		t.Fatalf("sign %s with sigstore: %v", repo, err)
	}
	return pub
}
