package wal

import (
	"fmt"

	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/vfs"
)

// frameAlign is the alignment of frames in a segment (its format).
const frameAlign = 8

// CutTail makes the unsealed segment at path end where a Scan of it (res)
// found its last frame, before anything is placed after it: the bytes past
// res.End are zeroed (up to res.DirtyEnd, with preallocate: the zeros of
// a preallocated file stay) or cut off, and the file is synced, so that
// what the Scan saw counts as durable. It fails with segment.ErrSealed
// for a sealed segment.
func CutTail(fsys vfs.FS, path string, res segment.ScanResult, preallocate bool) error {
	if res.Sealed {
		return fmt.Errorf("segment: open %s for append: %w", path, segment.ErrSealed)
	}
	f, err := fsys.OpenReadWrite(path)
	if err != nil {
		return err
	}
	if err := cutTail(f, path, res, preallocate); err != nil {
		f.Close()
		return fmt.Errorf("segment: open %s for append: %w", path, err)
	}
	return f.Close()
}

func cutTail(f vfs.File, path string, res segment.ScanResult, preallocate bool) error {
	var hb [segment.HeaderSize]byte
	if _, err := f.ReadAt(hb[:], 0); err != nil {
		return err
	}
	if _, err := segment.DecodeHeader(path, hb[:]); err != nil {
		return err
	}
	size, err := f.Size()
	if err != nil {
		return err
	}
	if res.End < segment.HeaderSize || res.End > size || res.End%frameAlign != 0 {
		return fmt.Errorf("scan end %d invalid for a file of %d bytes", res.End, size)
	}
	if size > res.End {
		if preallocate {
			// (grown in place or not: the zeros past the frames stay)
			if err := zeroFill(f, res.End, min(max(res.DirtyEnd, res.End), size)); err != nil {
				return err
			}
		} else if err := f.Truncate(res.End); err != nil {
			return err
		}
	}
	return f.Sync()
}

// zeroFill writes zeros from from to to.
func zeroFill(f vfs.File, from, to int64) error {
	zeros := make([]byte, min(1<<20, max(to-from, 0)))
	for off := from; off < to; {
		n := min(int64(len(zeros)), to-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}
