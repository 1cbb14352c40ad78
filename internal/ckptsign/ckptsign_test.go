package ckptsign

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A checkpoint verifies only as it was signed, and only under a trusted key: each way of
// changing it after the signature is refused by name.
func TestSignVerify(t *testing.T) {
	keyDir := t.TempDir()
	key, err := LoadOrCreateKey(filepath.Join(keyDir, "checkpoint-key"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreateKey(filepath.Join(keyDir, "checkpoint-key"))
	if err != nil || !again.Equal(key) {
		t.Fatalf("the key read back differs (%v)", err)
	}
	pubText, err := os.ReadFile(filepath.Join(keyDir, "checkpoint-key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublicKey(string(pubText))
	if err != nil || !pub.Equal(key.Public()) {
		t.Fatalf("checkpoint-key.pub: %v", err)
	}
	_, other, _ := ed25519.GenerateKey(nil)
	trusted := []ed25519.PublicKey{pub}

	make := func(t *testing.T) string {
		dir := t.TempDir()
		for name, data := range map[string]string{"config.dump": "{}", "checkpoint/core-1.img": "core", "checkpoint/pages-1.img": "pages"} {
			p := filepath.Join(dir, name)
			_ = os.MkdirAll(filepath.Dir(p), 0o700)
			if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		name   string
		signer ed25519.PrivateKey
		after  func(t *testing.T, dir string)
		says   string
	}{
		{"as signed", key, func(*testing.T, string) {}, ""},
		{"a file changed", key, func(t *testing.T, dir string) {
			_ = os.WriteFile(filepath.Join(dir, "checkpoint/core-1.img"), []byte("CORE"), 0o600)
		}, "checkpoint/core-1.img changed"},
		{"a file added", key, func(t *testing.T, dir string) {
			_ = os.WriteFile(filepath.Join(dir, "checkpoint/mountpoints-1.img"), []byte("m"), 0o600)
		}, "checkpoint/mountpoints-1.img was not signed"},
		{"a file removed", key, func(t *testing.T, dir string) {
			_ = os.Remove(filepath.Join(dir, "checkpoint/pages-1.img"))
		}, "pages-1.img was signed and is missing"},
		{"the manifest edited", key, func(t *testing.T, dir string) {
			p := filepath.Join(dir, SignatureFile)
			b, _ := os.ReadFile(p)
			_ = os.WriteFile(p, []byte(strings.Replace(string(b), `"size":4`, `"size":5`, 1)), 0o600)
		}, "does not match"},
		{"another key", other, func(*testing.T, string) {}, "neither this node's"},
		{"unsigned", nil, func(*testing.T, string) {}, "not signed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := make(t)
			if tc.signer != nil {
				if err := Sign(dir, tc.signer); err != nil {
					t.Fatal(err)
				}
			}
			tc.after(t, dir)
			_, err := Verify(dir, trusted)
			switch {
			case tc.says == "" && err != nil:
				t.Errorf("Verify: %v", err)
			case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
				t.Errorf("Verify: %v, want an error saying %q", err, tc.says)
			}
			if tc.signer == nil && !errors.Is(err, ErrUnsigned) {
				t.Errorf("unsigned: %v is not ErrUnsigned", err)
			}
		})
	}
}
