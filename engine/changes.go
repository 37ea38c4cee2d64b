package engine

import (
	"context"
	"errors"
	"iter"

	"github.com/seglog/seglog/store"
)

// Changes iterates over the store's change feed (store.Store.Changes).
func (db *DB) Changes(ctx context.Context, from store.Cursor, opts ...store.ChangesOption) iter.Seq2[store.Change, error] {
	return func(yield func(store.Change, error) bool) {
		yield(store.Change{}, errors.New("engine: Changes: not implemented yet"))
	}
}
