package event

import (
	"encoding/json"
	"strings"
	"testing"
)

var jsonSeeds = []string{
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
