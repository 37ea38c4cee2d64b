// Package listorder holds the ordered lists behind ListPage
// (docs/MULTIPROCESS.md, Many processes, Listing), so that a page costs a binary
// search and the page's own sessions, not a sort of every session: [IDs],
// the session IDs in order, kept sorted between pages with the IDs made
// since merged in once they are many; and the keys of the OrderUpdated
// order ([Key]: update time descending, then ID), with the selection of
// the first keys after a cursor without a sort ([Top]), a radix sort by
// time that keeps ties in ID order ([SortByTime]), the merge of the keys
// added since ([Merge]) and the walk of both lists together ([Walk]).
//
// It knows nothing of sessions but an ID: whether an entry still names a
// session, and what that session's listing is, the engine says through
// the callbacks it passes (engine/listupdated.go keeps the OrderUpdated
// order's state and the listings behind it). It takes no lock (its
// callers hold DB.mu) and starts no goroutine.
package listorder
