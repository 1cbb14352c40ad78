// Package configs holds the files rtshimd ships: the default daemon configuration.
package configs

import _ "embed"

// DefaultConfig is configs/config.toml, the documented default configuration.
//
//go:embed config.toml
var DefaultConfig []byte
