package listorder

import (
	"slices"
	"sort"
	"strings"
)

// Item is what a key of the OrderUpdated order places: a session, known
// by its pointer, and its ID, by which sessions of one time are ordered.
type Item interface {
	comparable
	ListID() string
}

// Key places item S at time At (its listing's update time when keyed).
type Key[S Item] struct {
	At int64
	S  S
}

// Before reports whether a sorts before b in OrderUpdated: the most
// recent first, then by ID.
func (a Key[S]) Before(b Key[S]) bool {
	return a.At > b.At || (a.At == b.At && a.S.ListID() < b.S.ListID())
}

// Compare orders keys as Before does, for slices.SortFunc.
func Compare[S Item](a, b Key[S]) int {
	switch {
	case a.Before(b):
		return -1
	case b.Before(a):
		return 1
	}
	return 0
}

// Merge merges added, sorted and short, into keys, sorted, dropping the
// entries of added that valid reports out of date.
func Merge[S Item](keys, added []Key[S], valid func(Key[S]) bool) []Key[S] {
	merged := make([]Key[S], 0, len(keys)+len(added))
	i, j := 0, 0
	for i < len(keys) || j < len(added) {
		if j == len(added) || (i < len(keys) && !added[j].Before(keys[i])) {
			merged = append(merged, keys[i])
			i++
		} else {
			if valid(added[j]) { // (added is short: its stale entries go now)
				merged = append(merged, added[j])
			}
			j++
		}
	}
	return merged
}

// Walk walks keys and added together in OrderUpdated from after from
// (all if nil), calling fn for each key that valid passes whose item's ID
// has prefix, until fn returns false. gone is called for each key of keys
// (not added) that valid refuses, to count what is out of date. If
// partial, keys are a selection: the walk stops where they end, before
// the keys of added past them. It returns the last key it walked and
// whether it ran out of keys with fn wanting more (only if partial).
func Walk[S Item](keys, added []Key[S], from *Key[S], partial bool, prefix string, valid func(Key[S]) bool, gone func(Key[S]), fn func(S) bool) (last Key[S], more bool) {
	i, j := 0, 0
	if from != nil {
		follows := func(k Key[S]) bool { return from.Before(k) }
		i = sort.Search(len(keys), func(n int) bool { return follows(keys[n]) })
		j = sort.Search(len(added), func(n int) bool { return follows(added[n]) })
	}
	var prev S
	for i < len(keys) || j < len(added) {
		if partial && i == len(keys) {
			return last, true
		}
		var k Key[S]
		inKeys := j == len(added) || (i < len(keys) && !added[j].Before(keys[i]))
		if inKeys {
			k, i = keys[i], i+1
		} else {
			k, j = added[j], j+1
		}
		last = k
		if k.S == prev {
			continue // (in both lists)
		}
		if !valid(k) {
			if inKeys {
				gone(k)
			}
			continue
		}
		prev = k.S
		if !strings.HasPrefix(k.S.ListID(), prefix) {
			continue
		}
		if !fn(k.S) {
			return last, false
		}
	}
	return last, false
}

// Top returns, sorted, the n keys that come first in OrderUpdated of
// those after from (all if nil), and whether they are all of them. One
// pass over keys, which it does not change: a bounded heap whose root is
// the last of those kept, so that most keys cost one comparison.
func Top[S Item](keys []Key[S], from *Key[S], n int) (top []Key[S], all bool) {
	heap := make([]Key[S], 0, n)
	down := func(i int) {
		for {
			c := 2*i + 1
			if c >= len(heap) {
				return
			}
			if c+1 < len(heap) && heap[c].Before(heap[c+1]) {
				c++ // (the later child)
			}
			if !heap[i].Before(heap[c]) {
				return
			}
			heap[i], heap[c] = heap[c], heap[i]
			i = c
		}
	}
	all = true
	for _, k := range keys {
		if from != nil && !from.Before(k) {
			continue
		}
		if len(heap) < n {
			heap = append(heap, k)
			for i := len(heap) - 1; i > 0; {
				p := (i - 1) / 2
				if !heap[p].Before(heap[i]) {
					break
				}
				heap[p], heap[i] = heap[i], heap[p]
				i = p
			}
			continue
		}
		all = false
		if k.Before(heap[0]) {
			heap[0] = k
			down(0)
		}
	}
	slices.SortFunc(heap, Compare[S])
	return heap, all
}

// SortByTime returns keys, which are in ID order, sorted into
// OrderUpdated by time alone: a stable radix sort (least significant
// digit first), so that items of one time stay in ID order. It does not
// write keys (pages read them meanwhile); the result may be keys itself
// if they were in order.
func SortByTime[S Item](keys []Key[S]) []Key[S] {
	if len(keys) < 2 {
		return keys
	}
	hi, lo := keys[0].At, keys[0].At
	for _, k := range keys {
		hi, lo = max(hi, k.At), min(lo, k.At)
	}
	// The digits are of hi-at: most recent first. (uint64 arithmetic:
	// any two int64 times are at most 2^64-1 apart.)
	span := uint64(hi) - uint64(lo)
	const bits = 11
	const mask = 1<<bits - 1
	var bufs [2][]Key[S] // (keys are only read: the passes write these in turn)
	src := keys
	for pass, shift := 0, 0; shift < 64 && span>>shift != 0; pass, shift = pass+1, shift+bits {
		if bufs[pass%2] == nil {
			bufs[pass%2] = make([]Key[S], len(keys))
		}
		dst := bufs[pass%2]
		var next [mask + 1]int
		for _, k := range src {
			next[(uint64(hi)-uint64(k.At))>>shift&mask]++
		}
		pos := 0
		for d, n := range next {
			next[d], pos = pos, pos+n
		}
		for _, k := range src {
			d := (uint64(hi) - uint64(k.At)) >> shift & mask
			dst[next[d]] = k
			next[d]++
		}
		src = dst
	}
	return src
}
