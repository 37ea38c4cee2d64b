package segment

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/seglog/seglog/event"
)

// Every time event.Validate accepts is storable: a record holds the
// difference from the previous event's time, and between any two times in
// [event.MinTime, event.MaxTime] it fits an int64. Outside that range it
// may not: such a log decodes as corrupt, which is why the engine refuses
// those times on append (item 6 of issue 15).
func TestEventTimesAtTheLimits(t *testing.T) {
	mk := func(times ...int64) []event.Event {
		evs := make([]event.Event, len(times))
		for i, tm := range times {
			evs[i] = event.Event{Seq: uint64(i), Type: "x", Time: tm, Data: json.RawMessage(`{}`)}
		}
		return evs
	}
	ok := mk(event.MinTime, event.MaxTime, event.MinTime, 0, event.MaxTime, event.MaxTime, event.MinTime, -1)
	for i := range ok {
		if err := ok[i].Validate(i); err != nil {
			t.Fatal(err)
		}
	}
	got, reason := decodeEvents(appendEvents(nil, ok), 0, uint32(len(ok)))
	if reason != "" || !equalEvents(got, ok) {
		t.Fatalf("times at the limits: decoded %v, %q", got, reason)
	}
	bad := mk(0, math.MaxInt64, math.MinInt64)
	if _, reason := decodeEvents(appendEvents(nil, bad), 0, uint32(len(bad))); !strings.Contains(reason, "time overflows") {
		t.Fatalf("times MaxInt64 then MinInt64 decoded (%q): the format stores more than the engine assumes; revisit event.MaxTime", reason)
	}
}
