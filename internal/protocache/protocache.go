// Package protocache keeps the wire encoding of the parts of CRI answers that seldom
// change — a pod or a container as the List RPCs report it, the attributes of its stats —
// so that a List call at 1,000 pods copies bytes instead of encoding every pod's maps of
// labels and annotations again (in profiles, encoding them was most of the daemon's time
// in ListPodSandbox and ListContainers, at 5 µs and 30 allocations per pod).
package protocache

import (
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Item is one object's message and its encoding, built again only when its key changes
// (the fields of the message that can change, such as a pod's state).
type Item[K comparable] struct {
	mu  sync.Mutex
	set bool
	key K
	msg proto.Message
	enc []byte
}

// Get returns the message and its encoding for key: the kept ones if they were built for
// key, else build's, kept from then on. The message is shared: callers must not change it.
func (c *Item[K]) Get(key K, build func() proto.Message) (proto.Message, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set || c.key != key {
		msg := build()
		enc, err := proto.Marshal(msg)
		if err != nil {
			// Only an invalid message fails (bad UTF-8 in a string): answer with what
			// the caller built, encoded by gRPC as before, and keep nothing.
			return msg, nil
		}
		c.set, c.key, c.msg, c.enc = true, key, msg, enc
	}
	return c.msg, c.enc
}

// Encoded is Get's encoding alone. A message Get could not keep (it cannot be encoded)
// is encoded again here, and what proto.Marshal gives for it is returned: the CRI decodes
// its requests with UTF-8 checks, so no label or annotation that reaches a List is one.
func (c *Item[K]) Encoded(key K, build func() proto.Message) []byte {
	msg, enc := c.Get(key, build)
	if enc == nil {
		enc, _ = proto.Marshal(msg)
	}
	return enc
}

// Messages is the kept message of each of objs, as item gives it (with its encoding): a
// List's items.
func Messages[T any, M proto.Message](objs []T, item func(T) (M, []byte)) []M {
	out := make([]M, len(objs))
	for i, o := range objs {
		out[i], _ = item(o)
	}
	return out
}

// Encodings is the kept encoding of each of objs, as item gives it, or the message
// encoded now where none could be kept (as Encoded does): a List's items on the wire.
func Encodings[T any, M proto.Message](objs []T, item func(T) (M, []byte)) [][]byte {
	out := make([][]byte, len(objs))
	for i, o := range objs {
		msg, enc := item(o)
		if enc == nil {
			enc, _ = proto.Marshal(msg)
		}
		out[i] = enc
	}
	return out
}

// SetField sets msg's message field name to the encoded message enc, as an unknown field,
// which the receiver decodes as the field itself. msg's own field must be empty.
func SetField(msg proto.Message, name protoreflect.Name, enc []byte) {
	m := msg.ProtoReflect()
	num := number(m, name)
	if plain.Load() {
		fd := m.Descriptor().Fields().ByNumber(num)
		v := m.NewField(fd)
		if proto.Unmarshal(enc, v.Message().Interface()) == nil {
			m.Set(fd, v)
			return
		}
	}
	b := make([]byte, 0, protowire.SizeTag(num)+protowire.SizeBytes(len(enc)))
	m.SetUnknown(appendField(b, num, enc))
}

// SetRepeated sets msg's repeated message field name to the encoded items, as unknown
// fields. msg's own field must be empty (it would be sent too).
func SetRepeated(msg proto.Message, name protoreflect.Name, items [][]byte) {
	m := msg.ProtoReflect()
	num := number(m, name)
	if plain.Load() {
		fd := m.Descriptor().Fields().ByNumber(num)
		list := m.Mutable(fd).List()
		var rest [][]byte // what does not decode goes out encoded, as before
		for _, it := range items {
			el := list.NewElement()
			if proto.Unmarshal(it, el.Message().Interface()) != nil {
				rest = append(rest, it)
				continue
			}
			list.Append(el)
		}
		if items = rest; len(items) == 0 {
			return
		}
	}
	n := 0
	for _, it := range items {
		n += protowire.SizeTag(num) + protowire.SizeBytes(len(it))
	}
	b := make([]byte, 0, n)
	for _, it := range items {
		b = appendField(b, num, it)
	}
	m.SetUnknown(b)
}

// plain: SetField and SetRepeated decode the encoding into the message's own field, so an
// answer is an ordinary message to whatever reads it in the daemon (an interceptor, a Go
// reader of the server's types). Off by default: [mechanisms] kept_list_encoding.
var plain atomic.Bool

// Plain turns the plain answers on or off for the whole process (the daemon, at start).
func Plain(on bool) { plain.Store(on) }

// IsPlain says the plain answers are on: a List handler then sends the messages it keeps
// (the managers' List) instead of encodings SetRepeated would decode again.
func IsPlain() bool { return plain.Load() }

// number is the field number of msg's field name; a name the message does not have is a
// mistake in the code, found by the first call.
func number(m protoreflect.Message, name protoreflect.Name) protowire.Number {
	f := m.Descriptor().Fields().ByName(name)
	if f == nil || f.Kind() != protoreflect.MessageKind {
		panic(fmt.Sprintf("protocache: %s has no message field %q", m.Descriptor().FullName(), name))
	}
	return f.Number()
}

func appendField(b []byte, num protowire.Number, enc []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, enc)
}
