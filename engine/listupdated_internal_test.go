package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// sortByTime sorts keys in ID order as a sort by (time, ID) does, for
// times of any span, ties and signs.
func TestSortByTime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, span := range []int64{1, 7, 1 << 12, 1 << 40, math.MaxInt64} {
		for _, n := range []int{0, 1, 2, 100, 5000} {
			keys := make([]updatedKey, n)
			for i := range keys {
				at := r.Int64N(span)
				if span == math.MaxInt64 && i%2 == 0 {
					at = -at - 1
				}
				keys[i] = updatedKey{at, &session{id: fmt.Sprintf("s%05d", i)}}
			}
			want := slices.Clone(keys)
			slices.SortFunc(want, compareKeys)
			sortByTime(keys)
			if !slices.Equal(keys, want) {
				t.Fatalf("span %d, %d keys: sorted differently", span, n)
			}
		}
	}
}
