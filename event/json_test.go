package event

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strings"
	"testing"
)

var jsonSeeds = []string{
	// strings longer than the eight-byte scan, a stop byte at each offset
	`{"a":"0123456789abcdef\"x"}`, "{\"a\":\"01234567\x01\"}", `{"a":"0123456789\u00e9abcdefgh"}`,
	`{"a":"01234567"}`, `{"a":"0123456\\"}`, "[\"0123456789abcdefé01234567\"]", `"0123456789abcdef`,
	`{}`, `[]`, `{"a":1}`, ` {"a" : [1, 2.5, -0.1e+3, true, false, null, "x\u00e9\n"]} `,
	`{"a":}`, `{"a":1,}`, `[1,]`, `01`, `-`, `1.`, `1e`, `.5`, `"\x"`, "\"\x01\"", "\"\xff\"",
	`"\ud800"`, `tru`, `nul`, `{"a":1}x`, `{"a" 1}`, `[1 2]`, ``, ` `, `"unterminated`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"turn":1,"text":"lorem ipsum dolor","nested":{"k":[{"x":-12.5e-3}]}}`,
}

func TestValidJSONMatchesStdlib(t *testing.T) {
	for _, s := range jsonSeeds {
		if got, want := validJSON([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("validJSON(%.40q) = %v, json.Valid = %v", s, got, want)
		}
	}
}

// FuzzValidJSON: the hand-written validator agrees with encoding/json.
func FuzzValidJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid = %v", b, got, want)
		}
	})
}

func BenchmarkValidJSON(b *testing.B) {
	doc := []byte(`{"turn":12,"step":3,"message":{"id":"a-1","role":"assistant","content":[{"type":"text","text":"` +
		strings.Repeat("the quick brown fox jumps over the lazy dog ", 6) + `"}],"source":{"kind":"model","provider":"p","model":"m"}}}`)
	for _, impl := range []struct {
		name string
		f    func([]byte) bool
	}{{"impl=seglog", validJSON}, {"impl=encoding-json", json.Valid}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if !impl.f(doc) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// TestSpecial8: the eight-byte test finds the same first stop byte as a
// byte-by-byte one, for every byte value at every position, among plain
// ASCII and among multi-byte UTF-8 (high) bytes, with or without a stop
// byte after it (whose borrow must not hide or move the first).
func TestSpecial8(t *testing.T) {
	stop := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }
	first := func(m uint64) int {
		if m == 0 {
			return -1
		}
		return bits.TrailingZeros64(m) >> 3
	}
	for _, fill := range []byte{'a', ' ', 0x7f, 0x80, 0xc3, 0xff} {
		for pos := range 8 {
			for v := range 256 {
				for _, later := range []int{-1, 0, 0x1f, '"', '\\'} {
					var w [8]byte
					for k := range w {
						w[k] = fill
					}
					w[pos] = byte(v)
					if later >= 0 && pos < 7 {
						w[7] = byte(later)
					}
					want := -1
					for k, c := range w {
						if stop(c) {
							want = k
							break
						}
					}
					if got := first(special8(binary.LittleEndian.Uint64(w[:]))); got != want {
						t.Fatalf("special8(% x): first stop byte %d, want %d", w, got, want)
					}
				}
			}
		}
	}
}
