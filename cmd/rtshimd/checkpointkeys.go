package main

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rtshimd/rtshimd/internal/ckptsign"
	"github.com/rtshimd/rtshimd/internal/config"
)

// checkpointKeys is the node's checkpoint signing key (<state_root>/checkpoint-key, made at
// first start) and the public keys whose checkpoints it restores: its own and those of
// checkpoints.trusted_keys.
func checkpointKeys(cfg *config.Config) (ed25519.PrivateKey, []ed25519.PublicKey, error) {
	if err := os.MkdirAll(cfg.StateRoot, 0o711); err != nil {
		return nil, nil, err
	}
	key, err := ckptsign.LoadOrCreateKey(filepath.Join(cfg.StateRoot, "checkpoint-key"))
	if err != nil {
		return nil, nil, err
	}
	trusted := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	for i, path := range cfg.Checkpoints.TrustedKeys {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoints.trusted_keys[%d]: %w", i, err)
		}
		pub, err := ckptsign.ParsePublicKey(string(b))
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoints.trusted_keys[%d] %s: %w", i, path, err)
		}
		trusted = append(trusted, pub)
	}
	return key, trusted, nil
}
