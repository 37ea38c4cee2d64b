package store

import (
	"encoding/json"

	"github.com/seglog/seglog/event"
)

// TitleEvent is the type of the event that names a session: its data
// holds the title as a string, {"title": "..."} (docs/EVENTS.md). The
// latest one is the session's title (Snapshot.Title).
const TitleEvent = "session/title"

// TitleOf returns the title e sets: data.title of a session/title event.
// ok is false for any other event, and for a session/title whose data has
// no string title (it names nothing).
func TitleOf(e *event.Event) (title string, ok bool) {
	if e.Type != TitleEvent {
		return "", false
	}
	var d struct {
		Title *string `json:"title"`
	}
	if json.Unmarshal(e.Data, &d) != nil || d.Title == nil {
		return "", false
	}
	return *d.Title, true
}

// LastTitle returns the title the latest session/title event of evs sets
// (TitleOf), scanning from the end; ok is false if none does.
func LastTitle(evs []event.Event) (title string, ok bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		if t, ok := TitleOf(&evs[i]); ok {
			return t, true
		}
	}
	return "", false
}
