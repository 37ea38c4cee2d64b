package engine

import "slices"

// What a write open need not check again (docs/DESIGN.md, "A write open
// checks each event once"). A session's checked events, [0, checked),
// keep the seed marker rules and are accepted by a catalog whose
// fingerprint is checkedCat (event.Catalog.Fingerprint): a write open
// checks only the events after them, if this DB's catalog accepts what
// that one did. They come from the index's record (written by the
// checkpoint, as of the events it holds), from this DB's write opens, and
// from the frames a write handle of this DB places (its appends passed
// the same catalog check, and the placement checks the seed rules).

// maxCatalogs bounds the fingerprints a DB remembers its catalog by.
const maxCatalogs = 64

// catalogNow returns the fingerprint of the DB's catalog and adds it to
// those the DB's catalog has had. A catalog only grows (Register adds):
// what it accepted under any of them it accepts now. Called with db.mu
// held.
func (db *DB) catalogNow() uint64 {
	fp := db.opts.Catalog.Fingerprint()
	if n := len(db.mu.catalogs); n == 0 || db.mu.catalogs[n-1] != fp {
		if !slices.Contains(db.mu.catalogs, fp) {
			if n == maxCatalogs {
				db.mu.catalogs = slices.Delete(db.mu.catalogs, 0, 1) // (the oldest: fewer counts trusted, none wrongly)
			}
			db.mu.catalogs = append(db.mu.catalogs, fp)
		}
	}
	return fp
}

// checkedFrom is where a write open of s starts its check: after the
// events checked under a catalog this DB's has had, else at 0. Called
// with db.mu held.
func (db *DB) checkedFrom(s *session) uint64 {
	db.catalogNow()
	if s.checked == 0 || !slices.Contains(db.mu.catalogs, s.checkedCat) {
		return 0
	}
	return min(s.checked, s.next)
}

// setChecked records that s's first n events are checked under the DB's
// catalog as it is now, and queues s's index record to say so. Called
// with db.mu held, after the check (the catalog that checked them is
// then a part of the one fingerprinted).
func (db *DB) setChecked(s *session, n uint64) {
	fp := db.catalogNow()
	if n == s.checked && fp == s.checkedCat {
		return
	}
	s.checked, s.checkedCat = n, fp
	if n > 0 {
		db.noteChecked(s)
	}
}

// noteChecked queues s's index record for the next checkpoint: its
// checked count moved on. Called with db.mu held.
func (db *DB) noteChecked(s *session) {
	if db.mu.checkedDirty == nil {
		db.mu.checkedDirty = map[*session]struct{}{}
	}
	db.mu.checkedDirty[s] = struct{}{}
}

// placedChecked counts the events evs of a write handle's frame of s
// (seqs from first), placed just now, as checked: they passed the
// handle's catalog check at Append or Enqueue, and they keep the seed
// rules, and the events before them are checked under this DB's catalog.
// Called with db.mu held, in the placement's registration.
func (db *DB) placedChecked(s *session, first uint64) bool {
	if s.checked != first || s.hdr == nil {
		return false
	}
	return first == 0 || slices.Contains(db.mu.catalogs, s.checkedCat)
}

// indexChecked is what s's index record says of its checked events, as
// of the record's first next events. Called with db.mu held.
func indexChecked(s *session, next uint64) (uint64, uint64) {
	n := min(s.checked, next)
	if n == 0 {
		return 0, 0
	}
	return n, s.checkedCat
}
