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

// UnmarshalConfig reads a config MarshalConfig wrote, as a new T.
func UnmarshalConfig[T any, P interface {
	*T
	proto.Message
}](raw json.RawMessage, what string) (P, error) {
	m := P(new(T))
	if err := protojson.Unmarshal(raw, m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", what, err)
	}
	return m, nil
}
