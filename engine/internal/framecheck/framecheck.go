package framecheck

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/seglog/seglog/internal/base"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/vfs"
)

// Options say which segments Run reads, and how far.
type Options struct {
	// Skip holds the segments the recovery sets aside or removes: not read
	Skip map[uint64]bool
	// DurableSeg and DurableOff: what the index proves durable (its
	// checkpoint): damage before it in that segment is no torn tail
	DurableSeg uint64
	DurableOff int64
	// Bounded: another process is writing the store and published its
	// durable end, BoundOff in segment BoundSeg: later segments are not
	// read, and that one only up to it (damage below it is no torn tail)
	Bounded  bool
	BoundSeg uint64
	BoundOff int64
}

// Counts are what Run read.
type Counts struct {
	Segments, Frames int
}

// Problem reports one inconsistency: its file, its offset (-1 when it has
// none), the session (frame key) it is about ("" when none), and what.
type Problem func(path string, off int64, session, what string)

// Run decodes every frame of the segments of the store in dir, and reads
// every dictionary file, reporting what is damaged to problem. It returns
// an error only if the directory cannot be listed.
func Run(fsys vfs.FS, dir string, o Options, problem Problem) (Counts, error) {
	var n Counts
	errProblem := func(err error) {
		var ce *base.CorruptionError
		var fe *base.FormatError
		if errors.As(err, &ce) {
			problem(ce.Path, ce.Offset, "", ce.Reason)
		} else if errors.As(err, &fe) {
			problem(fe.Path, 0, "", err.Error())
		} else {
			problem(dir, -1, "", err.Error())
		}
	}
	ids, err := segment.List(fsys, dir)
	if err != nil {
		return n, err
	}
	dicts := segment.NewDicts(fsys, dir)
	type badDict struct {
		err    error
		frames int
		first  string // the first frame naming it
	}
	bad := map[uint32]*badDict{}
	for _, id := range ids {
		if o.Skip[id] || (o.Bounded && id > o.BoundSeg) {
			continue
		}
		n.Segments++
		path := filepath.Join(dir, segment.Name(id))
		r, err := segment.OpenReaderDicts(fsys, path, dicts)
		if err != nil {
			errProblem(err)
			continue
		}
		if r.Header().ID != id {
			problem(path, 0, "", fmt.Sprintf("header says segment %d", r.Header().ID))
		}
		visit := func(fi *segment.FrameInfo) error {
			if fi.Kind == segment.KindSeal {
				return nil
			}
			n.Frames++
			if _, err := r.ReadFrame(fi.Offset); err != nil {
				if fi.Dict != 0 {
					if _, derr := dicts.Get(fi.Dict); derr != nil {
						// One problem per dictionary, at its file.
						b := bad[fi.Dict]
						if b == nil {
							b = &badDict{err: derr, first: fmt.Sprintf("%s @%d", path, fi.Offset)}
							bad[fi.Dict] = b
						}
						b.frames++
						return nil
					}
				}
				var ce *base.CorruptionError
				if errors.As(err, &ce) {
					problem(path, fi.Offset, string(fi.Key), ce.Reason)
				} else {
					problem(path, fi.Offset, string(fi.Key), err.Error())
				}
			}
			return nil
		}
		// After damage, report it and resume at the next valid frame.
		for from := int64(0); ; {
			so := segment.ScanOptions{From: from}
			if id == o.DurableSeg {
				so.Durable = o.DurableOff
			}
			if o.Bounded && id == o.BoundSeg {
				so.Limit = o.BoundOff
				so.Durable = max(so.Durable, o.BoundOff) // published durable: damage below it is no torn tail
			}
			_, err = r.Scan(so, visit)
			var ce *base.CorruptionError
			if err == nil || !errors.As(err, &ce) {
				break
			}
			problem(path, ce.Offset, "", ce.Reason)
			next, ok := r.NextFrame(max(ce.Offset, from) + 1)
			if !ok || (so.Limit > 0 && next >= so.Limit) {
				// Nothing after it (before the durable end another
				// process published) to resume at. Each resumption is
				// past the last: the loop ends.
				err = nil
				break
			}
			from = next
		}
		r.Close()
		if err != nil {
			problem(path, -1, "", err.Error())
		}
	}
	dictIDs, err := segment.ListDicts(fsys, dir)
	if err != nil {
		return n, err
	}
	for _, id := range dictIDs {
		if _, err := dicts.Get(id); err != nil && bad[id] == nil {
			errProblem(err)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(bad)) {
		b := bad[id]
		path, off, what := dicts.Path(id), int64(-1), b.err.Error()
		var ce *base.CorruptionError
		if errors.As(b.err, &ce) {
			path, off, what = ce.Path, ce.Offset, ce.Reason
		}
		problem(path, off, "", fmt.Sprintf("%s; %d frames name it, the first at %s", what, b.frames, b.first))
	}
	return n, nil
}
