package index

import (
	"fmt"
	"testing"
)

// TestRewriteIntentSizes: an intent whose moves carry new sizes (frames a
// rewrite recoded) reads back with them, under its own tag; one without
// keeps the tag builds before it read (1); a size cut short is malformed.
func TestRewriteIntentSizes(t *testing.T) {
	plain := Rewrite{Segment: 7, Generation: 2, HasMoves: true, Moves: []Move{{ID: "a", FirstSeq: 3, From: 64, To: 64}, {ID: "b", FirstSeq: 0, From: 512, To: 300}}}
	sized := plain
	sized.Moves = append([]Move(nil), plain.Moves...)
	sized.Moves[1].Size = 232
	for _, tt := range []struct {
		r   Rewrite
		tag byte
	}{{plain, rewriteMovesTag}, {sized, rewriteSizesTag}} {
		v := encodeRewrite(tt.r)
		if v[16] != tt.tag {
			t.Fatalf("tag %d, want %d", v[16], tt.tag)
		}
		got, ok := decodeRewrite(v)
		if !ok || fmt.Sprint(got) != fmt.Sprint(tt.r) {
			t.Fatalf("read back %+v (%v), want %+v", got, ok, tt.r)
		}
	}
	v := encodeRewrite(sized)
	if _, ok := decodeRewrite(v[:len(v)-1]); ok {
		t.Fatal("an intent cut in its last size read back")
	}
}
