package engine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
)

// Problem is one inconsistency Check found, with its location.
type Problem struct {
	Path    string // segment or index file
	Offset  int64  // -1 when the problem has no offset
	Session string // "" when it is not about one session
	What    string
}

func (p Problem) String() string {
	s := p.Path
	if p.Offset >= 0 {
		s += fmt.Sprintf(" @%d", p.Offset)
	}
	if p.Session != "" {
		s += fmt.Sprintf(" session %q", p.Session)
	}
	return s + ": " + p.What
}

// CheckReport is what Check read and found.
type CheckReport struct {
	Segments int
	Frames   int
	Sessions int
	Events   uint64
	Notes    []string // recoverable states (a torn tail the next open cuts), not problems
	Problems []Problem
}

// Check verifies a store at rest without changing it: every frame's
// checksum and payload in every segment, that each session's frames
// continue its seqs and follow its header, that every segment before the
// newest is sealed, and that the index (if any) agrees with the segments.
// It returns an error only if the store cannot be read at all.
func Check(dir string, opts *Options) (*CheckReport, error) {
	o, err := opts.withDefaults(dir)
	if err != nil {
		return nil, err
	}
	ids, err := segment.List(o.FS, dir)
	if err != nil {
		return nil, err
	}
	rep := &CheckReport{Segments: len(ids)}
	type frame struct {
		session string
		first   uint64
		count   uint32
		header  bool
	}
	frames := map[uint64]map[int64]frame{} // segment -> offset -> frame
	next := map[string]uint64{}
	known := map[string]bool{}
	uids := map[string]uint64{}     // incarnation of each known session
	repl := map[string]*migration{} // migrations whose events are not all met yet
	orphans := map[string]Problem{} // first frame of a session met without its header
	problem := func(path string, off int64, session, format string, args ...any) {
		rep.Problems = append(rep.Problems, Problem{Path: path, Offset: off, Session: session, What: fmt.Sprintf(format, args...)})
	}
	for i, id := range ids {
		path := filepath.Join(dir, segment.Name(id))
		r, err := segment.OpenReader(o.FS, path)
		if err != nil {
			var ce *CorruptionError
			if i == len(ids)-1 && unidentifiable(o.FS, path, err) {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s: creation never finished (no frame); the next open removes it", path))
				continue
			}
			if errors.As(err, &ce) {
				problem(path, ce.Offset, "", "%s", ce.Reason)
			} else {
				problem(path, -1, "", "%v", err)
			}
			continue
		}
		if r.Header().ID != id {
			problem(path, 0, "", "header says segment %d", r.Header().ID)
		}
		frames[id] = map[int64]frame{}
		visit := func(fi *segment.FrameInfo) error {
			if fi.Kind == segment.KindSeal {
				return nil
			}
			rep.Frames++
			key := string(fi.Key)
			f, err := r.ReadFrame(fi.Offset)
			if err != nil {
				var ce *CorruptionError
				if errors.As(err, &ce) {
					problem(path, fi.Offset, key, "%s", ce.Reason)
				} else {
					problem(path, fi.Offset, key, "%v", err)
				}
				return nil
			}
			switch fi.Kind {
			case segment.KindHeader:
				var rec headerRecord
				switch {
				case json.Unmarshal(f.Payload, &rec) != nil || rec.Header.ID != key:
					problem(path, fi.Offset, key, "bad session header record")
				case repl[key] != nil:
					problem(path, fi.Offset, key, "header inside the session's unfinished migration")
				case rec.Replaces != 0:
					// A migration; the replaced incarnation may be gone
					// (compacted).
					if known[key] && uids[key] != rec.Replaces {
						problem(path, fi.Offset, key, "migration replaces incarnation %d, the session's is %d", rec.Replaces, uids[key])
					}
					if rec.Events > 0 {
						repl[key] = &migration{uid: rec.UID, want: rec.Events, known: known[key], next: next[key], oldUID: uids[key], path: path, off: fi.Offset}
					}
					next[key] = 0
				case known[key]:
					problem(path, fi.Offset, key, "second header for the session")
				}
				if o, ok := orphans[key]; ok {
					rep.Problems = append(rep.Problems, o)
					delete(orphans, key)
				}
				known[key], uids[key] = true, rec.UID
				frames[id][fi.Offset] = frame{session: key, header: true}
			case segment.KindDelete:
				if m := repl[key]; m != nil && len(f.Payload) == 8 && binary.LittleEndian.Uint64(f.Payload) == m.uid {
					// An abandoned migration: the old incarnation stays.
					known[key], next[key], uids[key] = m.known, m.next, m.oldUID
					delete(repl, key)
					frames[id][fi.Offset] = frame{session: key}
					return nil
				}
				// A tombstone whose header compaction dropped is fine; it
				// accounts for the orphaned frames before it.
				delete(orphans, key)
				known[key], next[key] = false, 0
				frames[id][fi.Offset] = frame{session: key}
			case segment.KindEvents:
				if !known[key] {
					if _, ok := orphans[key]; !ok {
						orphans[key] = Problem{Path: path, Offset: fi.Offset, Session: key, What: "events frame of a session without a header, and no tombstone after it (orphan)"}
					}
				} else if fi.FirstSeq != next[key] {
					problem(path, fi.Offset, key, "frame starts at seq %d, expected %d", fi.FirstSeq, next[key])
				}
				next[key] = fi.FirstSeq + uint64(fi.Count)
				if m := repl[key]; m != nil && next[key] >= m.want {
					if next[key] > m.want {
						problem(path, fi.Offset, key, "migration declared %d events, its frames hold more", m.want)
					}
					delete(repl, key) // the migration took over
				}
				rep.Events += uint64(fi.Count)
				frames[id][fi.Offset] = frame{session: key, first: fi.FirstSeq, count: fi.Count}
			}
			return nil
		}
		// Scan; after damage, report it and resume at the next valid frame,
		// so that one bad frame is one problem and what follows is checked.
		var res segment.ScanResult
		for from := int64(0); ; {
			res, err = r.Scan(segment.ScanOptions{From: from}, visit)
			var ce *CorruptionError
			if err == nil || !errors.As(err, &ce) {
				break
			}
			problem(path, ce.Offset, "", "%s", ce.Reason)
			next, ok := r.NextFrame(ce.Offset + 1)
			if !ok {
				err = nil
				res.Sealed = true // the damage already counts; no second problem for the end
				break
			}
			from = next
		}
		r.Close()
		switch {
		case err != nil:
			problem(path, -1, "", "%v", err)
		case i < len(ids)-1 && !res.Sealed:
			problem(path, res.End, "", "segment before the newest is not sealed")
		case res.Torn:
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s @%d: torn tail (%s); the next open cuts it", path, res.End, res.TornReason))
		}
	}
	for _, p := range orphans {
		rep.Problems = append(rep.Problems, p)
	}
	for key, m := range repl {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s @%d: the migration of session %q was cut short; the next open abandons it (the old format stays)", m.path, m.off, key))
	}
	for _, alive := range known {
		if alive {
			rep.Sessions++
		}
	}
	if o.NoIndex {
		return rep, nil
	}
	if _, err := os.Stat(o.IndexPath); err != nil {
		rep.Notes = append(rep.Notes, "no index file: the next open rebuilds it from the segments")
		return rep, nil
	}
	idx, err := index.Open(o.IndexPath, &index.Options{ReadOnly: true})
	if err != nil {
		problem(o.IndexPath, -1, "", "%v", err)
		return rep, nil
	}
	defer idx.Close()
	err = idx.Sessions(func(s index.Session) error {
		if !known[s.ID] {
			problem(o.IndexPath, -1, s.ID, "indexed session has no header in the segments")
			return nil
		}
		if s.Events > next[s.ID] {
			problem(o.IndexPath, -1, s.ID, "index says %d events, the segments hold %d", s.Events, next[s.ID])
		}
		fs, err := idx.Frames(s.ID)
		if err != nil {
			problem(o.IndexPath, -1, s.ID, "%v", err)
			return nil
		}
		for _, f := range fs {
			got, ok := frames[f.Segment][f.Offset]
			if !ok || got.session != s.ID || got.first != f.FirstSeq || got.count != f.Count {
				problem(o.IndexPath, -1, s.ID, "indexed frame (segment %d @%d, seqs %d+%d) does not match the segments", f.Segment, f.Offset, f.FirstSeq, f.Count)
			}
		}
		return nil
	})
	if err != nil {
		problem(o.IndexPath, -1, "", "%v", err)
	}
	return rep, nil
}

// RebuildIndex removes the index of a store at rest and rebuilds it from
// the segments (an Open without index reads them all; Close checkpoints).
func RebuildIndex(dir string, opts *Options) error {
	o, err := opts.withDefaults(dir)
	if err != nil {
		return err
	}
	if o.NoIndex {
		return errors.New("engine: the store has no index to rebuild")
	}
	if err := index.Remove(o.IndexPath); err != nil {
		return err
	}
	db, err := Open(dir, opts)
	if err != nil {
		return err
	}
	return db.Close()
}

// migration is a migration Check met whose events are not all seen yet,
// with the state of the incarnation it replaces.
type migration struct {
	uid, want    uint64
	known        bool
	next, oldUID uint64
	path         string
	off          int64
}
