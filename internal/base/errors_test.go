package base

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestErrorKinds(t *testing.T) {
	ce := &CorruptionError{Path: "db/1.seg", Offset: 128, Reason: "checksum mismatch", Err: errors.New("cause")}
	wrapped := fmt.Errorf("open: %w", ce)
	var got *CorruptionError
	if !errors.Is(wrapped, ErrCorrupt) || !errors.As(wrapped, &got) || got.Offset != 128 {
		t.Errorf("wrapped corruption not matched: %v", wrapped)
	}
	if errors.Is(wrapped, ErrFormat) {
		t.Error("corruption matches ErrFormat")
	}
	for _, want := range []string{"db/1.seg", "offset 128", "checksum mismatch", "cause"} {
		if !strings.Contains(ce.Error(), want) {
			t.Errorf("%q lacks %q", ce.Error(), want)
		}
	}
	newer := &FormatError{Path: "p", What: "segment", Version: 9, Supported: 1, Oldest: 1}
	older := &FormatError{Path: "p", What: "segment", Version: 0, Supported: 1, Oldest: 1}
	if !newer.Newer() || older.Newer() || !errors.Is(newer, ErrFormat) || errors.Is(newer, ErrCorrupt) {
		t.Error("FormatError direction or kind wrong")
	}
	if !strings.Contains(newer.Error(), "newer") || !strings.Contains(newer.Error(), "upgrade") {
		t.Errorf("newer message: %q", newer.Error())
	}
	if !strings.Contains(older.Error(), "older") || !strings.Contains(older.Error(), "no upgrade path") {
		t.Errorf("older message: %q", older.Error())
	}
}
