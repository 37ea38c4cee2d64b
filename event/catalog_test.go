package event

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCatalog(t *testing.T) {
	c := NewCatalog()
	for _, typ := range []string{"turn/start", "approval/requested", "subagent/spawned", "tool-workflow/x"} {
		if !c.Known(typ) {
			t.Errorf("%s unknown", typ)
		}
	}
	for _, typ := range []string{"mystery/event", "approval/", "request/header-delta", "turn"} {
		if c.Known(typ) {
			t.Errorf("%s known", typ)
		}
	}
	unknown := &Event{Seq: 6, Type: "mystery/event", Data: json.RawMessage(`{}`)}
	err := c.Check(unknown)
	var ue *UnsupportedError
	if !errors.Is(err, ErrUnsupported) || !errors.As(err, &ue) || ue.Seq != 6 || ue.Type != "mystery/event" {
		t.Errorf("Check(unknown) = %v", err)
	}
	unknown.Ignorable = true
	if err := c.Check(unknown); err != nil {
		t.Errorf("ignorable unknown refused: %v", err)
	}
	c.Register("mystery/*")
	unknown.Ignorable = false
	if err := c.Check(unknown); err != nil {
		t.Errorf("registered family refused: %v", err)
	}
	for _, data := range []string{`{"reason":"fallback","header":{}}`, `{"reason":"initial","header":{"system":"x"}}`} {
		if err := c.Check(&Event{Type: "request/header", Data: json.RawMessage(data)}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("retired %s accepted", data)
		}
	}
	if err := c.Check(&Event{Type: "request/header", Data: json.RawMessage(`{"reason":"initial","header":{"config":{}}}`)}); err != nil {
		t.Errorf("current request/header refused: %v", err)
	}
}

// AnyCatalog accepts every type and shape (the inspectors' catalog),
// where NewCatalog refuses them.
func TestAnyCatalog(t *testing.T) {
	evs := []Event{
		{Seq: 0, Type: "mystery/event", Data: json.RawMessage(`{}`)},
		{Seq: 1, Type: "request/header", Data: json.RawMessage(`{"reason":"fallback"}`)},
	}
	for i := range evs {
		if err := NewCatalog().Check(&evs[i]); err == nil {
			t.Errorf("NewCatalog accepted %s", evs[i].Type)
		}
		if err := AnyCatalog().Check(&evs[i]); err != nil {
			t.Errorf("AnyCatalog refused %s: %v", evs[i].Type, err)
		}
	}
	if !AnyCatalog().Known("x") {
		t.Error("AnyCatalog does not know every type")
	}
}

func TestCatalogTypes(t *testing.T) {
	c := NewCatalog("acme/deploy", "acme/*")
	types := c.Types()
	if !slices.IsSorted(types) {
		t.Errorf("Types not sorted: %v", types)
	}
	for _, want := range []string{"acme/deploy", "acme/*", "approval/*", "turn/start", "tool/code-dispatch"} {
		if !slices.Contains(types, want) {
			t.Errorf("Types lacks %q", want)
		}
	}
	for _, typ := range types { // every listed type (a family by a member) is known
		if !c.Known(strings.Replace(typ, "*", "x", 1)) {
			t.Errorf("listed %q, but it is not known", typ)
		}
	}
}

// Only a type ending in "/*" admits a family (NewCatalog, docs/EVENTS.md):
// "*" or "acme*" are names like any other, so that a host registering
// them does not turn the catalog into one that admits every type, or
// "acmeX" with "acme/...".
func TestFamilyNeedsSlashStar(t *testing.T) {
	c := NewCatalog("*", "acme*", "tools/*")
	for _, typ := range []string{"mystery/event", "acmeX", "acme/deploy", "x"} {
		if c.Known(typ) {
			t.Errorf("%q known", typ)
		}
	}
	for _, typ := range []string{"*", "acme*", "tools/a", "tools/a/b"} {
		if !c.Known(typ) {
			t.Errorf("%q unknown", typ)
		}
	}
	if typ := "tools/"; c.Known(typ) {
		t.Errorf("%q known: a family has members, not its bare prefix", typ)
	}
}

// A catalog's fingerprint is its types': equal for catalogs that accept
// the same types, whatever the order they were registered in, and new
// after a Register that adds one (the cache is dropped), not after one
// that adds nothing.
func TestCatalogFingerprint(t *testing.T) {
	a, b := NewCatalog("x/one", "fam/*"), NewCatalog("fam/*", "x/one", "x/one")
	if a.Fingerprint() != b.Fingerprint() || a.Fingerprint() == 0 {
		t.Fatalf("same types: %x, %x", a.Fingerprint(), b.Fingerprint())
	}
	before := a.Fingerprint()
	a.Register("x/one", "fam/*")
	if a.Fingerprint() != before {
		t.Errorf("a Register that adds nothing changed the fingerprint")
	}
	a.Register("x/two")
	if a.Fingerprint() == before {
		t.Errorf("a Register that adds a type kept the fingerprint")
	}
	b.Register("fam2/*")
	if b.Fingerprint() == before || b.Fingerprint() == a.Fingerprint() {
		t.Errorf("a Register that adds a family kept the fingerprint, or equals another catalog's")
	}
	if NewCatalog().Fingerprint() == AnyCatalog().Fingerprint() {
		t.Errorf("AnyCatalog has the default catalog's fingerprint")
	}
}
