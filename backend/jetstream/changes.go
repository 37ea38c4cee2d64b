package jetstream

import (
	"context"
	"errors"
	"iter"

	"github.com/seglog/seglog/store"
)

// Changes iterates over the store's change feed (store.Store.Changes).
func (s *Store) Changes(ctx context.Context, from store.Cursor, opts ...store.ChangesOption) iter.Seq2[store.Change, error] {
	return func(yield func(store.Change, error) bool) {
		yield(store.Change{}, errors.New("jetstream: Changes: not implemented yet"))
	}
}
