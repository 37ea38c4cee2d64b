package segment

import (
	"errors"
	"fmt"
)

// A frame can also travel outside a segment file, as one message of a
// replicated backend (backend/jetstream): the same bytes, laid out as if
// the frame stood at offset HeaderSize of a segment and was the first
// frame of its write (base = HeaderSize). The checksum covers it as in a
// file; nothing else of the file format applies.

// MarshalFrame returns the encoded frame e as a standalone message. A
// frame compressed with a dictionary cannot travel (the receiver has no
// dictionaries): encode messages without one.
func MarshalFrame(e *Encoded) []byte {
	b := make([]byte, e.Size())
	putFrame(b, e.kind, e.codec, e.key, e.stored, e.rawLen, e.firstSeq, e.count, HeaderSize)
	return b
}

// UnmarshalFrame verifies and decodes a standalone frame made by
// MarshalFrame: an events, header or tombstone frame and nothing after it.
// name labels errors (the message's subject and sequence, say); any
// failure is a *CorruptionError.
func UnmarshalFrame(name string, b []byte) (*Frame, error) {
	f, err := DecodeFrameAt(name, b, HeaderSize, 0, nil)
	var ce *CorruptionError
	if errors.As(err, &ce) {
		ce.Offset = 0 // the message is the frame: no offset into it means more
		return nil, ce
	}
	if err != nil {
		return nil, err
	}
	if f.Size != int64(len(b)) {
		return nil, &CorruptionError{Path: name, Reason: fmt.Sprintf("%d bytes after the frame", int64(len(b))-f.Size)}
	}
	return f, nil
}
