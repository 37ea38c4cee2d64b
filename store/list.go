package store

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ListOrder is the order of ListPage's sessions.
type ListOrder int

const (
	// OrderID sorts sessions by ID (byte order); the cursor is the last
	// ID of the page. The default.
	OrderID ListOrder = iota
	// OrderUpdated sorts sessions most recently updated first (Snapshot
	// UpdatedAt descending; sessions updated at the same millisecond by
	// ID). The cursor is "<updatedAt>:<id>" of the page's last session
	// (UpdatedCursor): a session updated between two pages moves ahead
	// of the cursor and is left out of the later pages (a new listing
	// shows it first), so no session is shown twice while paging.
	OrderUpdated
)

func (o ListOrder) String() string {
	switch o {
	case OrderID:
		return "id"
	case OrderUpdated:
		return "updated"
	}
	return "ListOrder(" + strconv.Itoa(int(o)) + ")"
}

// ParseListOrder parses "id" or "updated" (ListOrder.String).
func ParseListOrder(s string) (ListOrder, error) {
	switch s {
	case "id", "":
		return OrderID, nil
	case "updated":
		return OrderUpdated, nil
	}
	return 0, fmt.Errorf("%w: list order %q (id or updated)", ErrInvalidArgument, s)
}

// ListOptions selects and pages what ListPage returns. The zero value
// lists every session, in ID order.
type ListOptions struct {
	// Prefix keeps the sessions whose ID starts with it.
	Prefix string
	// Cwd keeps the sessions whose header's Cwd is it.
	Cwd string
	// OrderBy is the order of the sessions (OrderID, OrderUpdated).
	OrderBy ListOrder
	// After keeps the sessions that sort after it: pass the cursor
	// ListPage returned for the previous page (in OrderID, an ID; in
	// OrderUpdated, an UpdatedCursor).
	After string
	// Limit is the most sessions a page holds; 0 means no limit, and a
	// negative one is ErrInvalidArgument.
	Limit int
}

// UpdatedCursor is the cursor of OrderUpdated that follows a session
// updated at updatedAt (Snapshot.UpdatedAt): "<updatedAt>:<id>", the time
// in decimal milliseconds.
func UpdatedCursor(updatedAt int64, id string) string {
	return strconv.FormatInt(updatedAt, 10) + ":" + id
}

// ParseUpdatedCursor splits an UpdatedCursor into the time and the ID.
func ParseUpdatedCursor(c string) (int64, string, error) {
	t, id, ok := strings.Cut(c, ":")
	at, err := strconv.ParseInt(t, 10, 64)
	if !ok || err != nil {
		return 0, "", fmt.Errorf("%w: list cursor %q is not <updatedAt>:<id> (the cursor of a page in updated order)", ErrInvalidArgument, c)
	}
	return at, id, nil
}

// Check reports options no page can follow (ErrInvalidArgument).
func (o ListOptions) Check() error {
	if o.Limit < 0 {
		return fmt.Errorf("%w: list limit %d is negative (0 means no limit)", ErrInvalidArgument, o.Limit)
	}
	switch o.OrderBy {
	case OrderID:
	case OrderUpdated:
		if o.After != "" {
			if _, _, err := ParseUpdatedCursor(o.After); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%w: list order %d", ErrInvalidArgument, int(o.OrderBy))
	}
	return nil
}

// Skips reports whether a session of this ID is left out of every page
// by Prefix and (in ID order) After alone, before its header is known.
func (o ListOptions) Skips(id string) bool {
	return !strings.HasPrefix(id, o.Prefix) || (o.OrderBy == OrderID && o.After != "" && id <= o.After)
}

// Keeps reports whether s passes the filters (Prefix, Cwd) and follows
// the cursor (After).
func (o ListOptions) Keeps(s *Snapshot) bool {
	if o.Skips(s.Header.ID) || (o.Cwd != "" && s.Header.Cwd != o.Cwd) {
		return false
	}
	if o.OrderBy == OrderUpdated && o.After != "" {
		at, id, err := ParseUpdatedCursor(o.After)
		if err != nil {
			return false
		}
		return s.UpdatedAt < at || (s.UpdatedAt == at && s.Header.ID > id)
	}
	return true
}

// Page selects the page of snaps that opts asks for, and returns it, in
// opts.OrderBy order, with the cursor of the next page: that of the last
// session of this one, or "" if no session follows it. snaps may be in any
// order; it is sorted in place.
func Page(snaps []Snapshot, opts ListOptions) ([]Snapshot, string, error) {
	if err := opts.Check(); err != nil {
		return nil, "", err
	}
	byID := func(a, b Snapshot) int { return strings.Compare(a.Header.ID, b.Header.ID) }
	if opts.OrderBy == OrderUpdated {
		slices.SortFunc(snaps, func(a, b Snapshot) int {
			if c := cmp.Compare(b.UpdatedAt, a.UpdatedAt); c != 0 {
				return c
			}
			return byID(a, b)
		})
	} else if !slices.IsSortedFunc(snaps, byID) {
		slices.SortFunc(snaps, byID)
	}
	out := []Snapshot{}
	for i := range snaps {
		if !opts.Keeps(&snaps[i]) {
			continue
		}
		if opts.Limit > 0 && len(out) == opts.Limit {
			return out, opts.cursor(&out[len(out)-1]), nil
		}
		out = append(out, snaps[i])
	}
	return out, "", nil
}

// cursor is the cursor that follows s in o's order.
func (o ListOptions) cursor(s *Snapshot) string {
	if o.OrderBy == OrderUpdated {
		return UpdatedCursor(s.UpdatedAt, s.Header.ID)
	}
	return s.Header.ID
}
