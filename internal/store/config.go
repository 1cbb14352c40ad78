package store

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// MarshalConfig is a CRI config as a record keeps it: protojson, which keeps every field
// kubelet sent, unknown ones too. what names it in errors ("container config").
func MarshalConfig(m proto.Message, what string) (json.RawMessage, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", what, err)
	}
	return b, nil
}

// UnmarshalConfig reads into m a config MarshalConfig wrote.
func UnmarshalConfig(raw json.RawMessage, m proto.Message, what string) error {
	if err := protojson.Unmarshal(raw, m); err != nil {
		return fmt.Errorf("decode %s: %w", what, err)
	}
	return nil
}
