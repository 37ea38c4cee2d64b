package store

import (
	"fmt"
	"strings"
)

// ListOptions selects and pages what ListPage returns, in ID order. The
// zero value lists every session.
type ListOptions struct {
	// Prefix keeps the sessions whose ID starts with it.
	Prefix string
	// Cwd keeps the sessions whose header's Cwd is it.
	Cwd string
	// After keeps the sessions whose ID sorts after it: pass the cursor
	// ListPage returned for the previous page.
	After string
	// Limit is the most sessions a page holds; 0 means no limit, and a
	// negative one is ErrInvalidArgument.
	Limit int
}

// Check reports options no page can follow (ErrInvalidArgument).
func (o ListOptions) Check() error {
	if o.Limit < 0 {
		return fmt.Errorf("%w: list limit %d is negative (0 means no limit)", ErrInvalidArgument, o.Limit)
	}
	return nil
}

// Skips reports whether a session of this ID is left out of every page
// by Prefix and After alone (before its header is known).
func (o ListOptions) Skips(id string) bool {
	return !strings.HasPrefix(id, o.Prefix) || (o.After != "" && id <= o.After)
}

// Page selects the page of snaps (sorted by ID) that opts asks for, and
// returns it with the cursor of the next page: the last ID of this one,
// or "" if no session follows it.
func Page(snaps []Snapshot, opts ListOptions) ([]Snapshot, string, error) {
	if err := opts.Check(); err != nil {
		return nil, "", err
	}
	out := []Snapshot{}
	for _, s := range snaps {
		if opts.Skips(s.Header.ID) || (opts.Cwd != "" && s.Header.Cwd != opts.Cwd) {
			continue
		}
		if opts.Limit > 0 && len(out) == opts.Limit {
			return out, out[len(out)-1].Header.ID, nil
		}
		out = append(out, s)
	}
	return out, "", nil
}
