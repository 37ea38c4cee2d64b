package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestImportRates checks the import summary's rates on made-up reports
// (no clock): none over a run too short to measure or with no session
// stored, and over a longer run a rate that never reads "0 sessions/s"
// for sessions imported.
func TestImportRates(t *testing.T) {
	for _, c := range []struct {
		name    string
		rep     importReport
		want    string // the summary's tail after the elapsed time
		notWant []string
	}{
		{"short run", importReport{Sessions: 3, Events: 30, Bytes: 3000, Elapsed: 7 * time.Millisecond}, "in 0.01s\n", []string{"/s"}},
		{"no time at all", importReport{Sessions: 1, Events: 1, Bytes: 100}, "in 0.00s\n", []string{"/s", "NaN", "Inf"}},
		{"nothing stored", importReport{Elapsed: 3 * time.Second}, "in 3.00s\n", []string{"/s"}},
		{"slow sessions", importReport{Sessions: 1, Events: 5, Bytes: 20_000, Elapsed: 2 * time.Second}, "in 2.00s: 0.5 sessions/s, 0.01 MB/s\n", []string{"0 sessions/s"}},
		{"many sessions", importReport{Sessions: 250, Events: 2500, Bytes: 50_000_000, Elapsed: 2 * time.Second}, "in 2.00s: 125 sessions/s, 25 MB/s\n", nil},
	} {
		var b bytes.Buffer
		if err := printImport(&b, &c.rep, false, true); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if !strings.HasSuffix(out, c.want) {
			t.Errorf("%s: %q, want it to end %q", c.name, out, c.want)
		}
		for _, bad := range c.notWant {
			if strings.Contains(out, bad) {
				t.Errorf("%s: %q holds %q", c.name, out, bad)
			}
		}
	}
}
