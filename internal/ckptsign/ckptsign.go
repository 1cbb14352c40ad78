// Package ckptsign signs the checkpoints a node writes and verifies them before a restore:
// a checkpoint's CRIU image decides, as root, far more of the restored processes than any
// check of it can cover (their namespaces, mounts, cgroups, scheduling, credentials), so
// only a checkpoint this node wrote, or one signed by a key the operator trusts, is
// restored. The signature is ed25519 over a manifest of every file (path, size, SHA-256),
// kept in the checkpoint as SignatureFile.
package ckptsign

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rtshimd/rtshimd/internal/fsafe/regfile"
)

// SignatureFile is the signature's name in a checkpoint (beside config.dump).
const SignatureFile = "rtshimd-signature.json"

// maxSignature bounds the signature file read (a manifest line per file).
const maxSignature = 16 << 20

// File is one file of a checkpoint as signed.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

type signature struct {
	Version   int    `json:"version"`
	Files     []File `json:"files"`
	PublicKey string `json:"public_key"` // base64
	Signature string `json:"signature"`  // base64, over payload()
}

// payload is what is signed: the manifest, in path order, as JSON.
func payload(files []File) []byte {
	b, _ := json.Marshal(struct {
		Version int    `json:"version"`
		Files   []File `json:"files"`
	}{1, files})
	return b
}

// LoadOrCreateKey reads the node's private key at path, or makes one (root's only) and
// writes its public key beside it (path + ".pub", world-readable: the operator hands it
// to other nodes' checkpoints.trusted_keys).
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	b, err := regfile.ReadNoFollow(path, 4096)
	if err == nil {
		seed, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
		if derr != nil || len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("checkpoint key %s: not a base64 ed25519 seed", path)
		}
		key := ed25519.NewKeyFromSeed(seed)
		return key, writePublic(path, key)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint key %s: %w", path, err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key %s: %w", path, err)
	}
	_, err = f.WriteString(base64.StdEncoding.EncodeToString(key.Seed()) + "\n")
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("checkpoint key %s: %w", path, err)
	}
	return key, writePublic(path, key)
}

func writePublic(path string, key ed25519.PrivateKey) error {
	pub := base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)) + "\n"
	if b, err := os.ReadFile(path + ".pub"); err == nil && string(b) == pub {
		return nil
	}
	tmp := path + ".pub.tmp"
	if err := os.WriteFile(tmp, []byte(pub), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path+".pub")
}

// ParsePublicKey reads a public key as LoadOrCreateKey writes it (base64 of 32 bytes).
func ParsePublicKey(text string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, errors.New("not a base64 ed25519 public key")
	}
	return ed25519.PublicKey(b), nil
}

// Sign writes SignatureFile into dir, over every regular file under it (directories are
// named by their files; anything else is an error).
func Sign(dir string, key ed25519.PrivateKey) error {
	files, err := manifest(dir)
	if err != nil {
		return err
	}
	sig := signature{
		Version: 1, Files: files,
		PublicKey: base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey)),
		Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(key, payload(files))),
	}
	b, err := json.Marshal(sig)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, SignatureFile), b, 0o600)
}

// ErrUnsigned is a checkpoint without a signature.
var ErrUnsigned = errors.New("the checkpoint is not signed (" + SignatureFile + ")")

// Verify checks that dir holds exactly the files its SignatureFile names, each as signed,
// and that a key in trusted signed them; it returns that key (base64). dir must be the
// caller's own copy, which nobody else writes.
func Verify(dir string, trusted []ed25519.PublicKey) (string, error) {
	b, err := regfile.ReadNoFollow(filepath.Join(dir, SignatureFile), maxSignature)
	if errors.Is(err, fs.ErrNotExist) {
		return "", ErrUnsigned
	}
	if err != nil {
		return "", err
	}
	var sig signature
	if err := json.Unmarshal(b, &sig); err != nil || sig.Version != 1 {
		return "", fmt.Errorf("%s: not a version 1 signature", SignatureFile)
	}
	pub, err := ParsePublicKey(sig.PublicKey)
	if err != nil {
		return "", fmt.Errorf("%s: %w", SignatureFile, err)
	}
	if !slices.ContainsFunc(trusted, func(k ed25519.PublicKey) bool { return k.Equal(pub) }) {
		return "", fmt.Errorf("signed by key %s, which is neither this node's nor one of checkpoints.trusted_keys", sig.PublicKey)
	}
	raw, err := base64.StdEncoding.DecodeString(sig.Signature)
	if err != nil || !ed25519.Verify(pub, payload(sig.Files), raw) {
		return "", fmt.Errorf("%s: the signature does not match its manifest", SignatureFile)
	}
	got, err := manifest(dir)
	if err != nil {
		return "", err
	}
	want := map[string]File{}
	for _, f := range sig.Files {
		want[f.Path] = f
	}
	for _, f := range got {
		w, ok := want[f.Path]
		switch {
		case !ok:
			return "", fmt.Errorf("%s was not signed (added since)", f.Path)
		case w != f:
			return "", fmt.Errorf("%s changed since it was signed", f.Path)
		}
		delete(want, f.Path)
	}
	for p := range want {
		return "", fmt.Errorf("%s was signed and is missing", p)
	}
	return sig.PublicKey, nil
}

// manifest lists dir's regular files but SignatureFile, in path order, hashed.
func manifest(dir string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == SignatureFile {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", rel)
		}
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		files = append(files, File{Path: filepath.ToSlash(rel), Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
		return nil
	})
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, err
}
