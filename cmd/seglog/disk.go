package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/segment"
)

// diskJSON is what the files of a store take, by kind (stats --json's
// "disk"): its fields add up to Total, the bytes (file sizes) of every
// file under the store's directory.
type diskJSON struct {
	Total int64 `json:"total"`
	// Segments: the segment files up to the end of their last frame;
	// SegmentRoom: past it (the zeros preallocated ahead of the active
	// segment's tail and in a segment prepared for the next roll, or a
	// torn tail the next open trims)
	Segments    int64 `json:"segments"`
	SegmentRoom int64 `json:"segmentRoom"`
	// Index: index.db; Dictionaries: the *.dict files (DictionaryFiles
	// of them)
	Index           int64 `json:"index"`
	Dictionaries    int64 `json:"dictionaries"`
	DictionaryFiles int   `json:"dictionaryFiles"`
	// Search: the full-text index (search/, made by a first search;
	// 0 in a store never searched)
	Search int64 `json:"search"`
	// Coordination: LOCK, locks, shm and the lease-* holder records
	Coordination int64 `json:"coordination"`
	// Other: everything else (types.json, temporaries of a write in
	// progress or that a crash left, quarantine/, foreign files)
	Other int64 `json:"other"`
}

// diskUsage returns what the files under dir take, by kind. A segment
// whose file ends in zeros (the active one, one prepared for a roll) is
// scanned for the end of its last frame; any other ends with its last
// frame (a sealed segment is trimmed to its seal).
func diskUsage(dir string) (diskJSON, error) {
	var d diskJSON
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if path != dir && errors.Is(err, fs.ErrNotExist) {
				return nil // removed since listed (a compaction, a lease let go)
			}
			return err
		}
		if !e.Type().IsRegular() {
			return nil
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		n := fi.Size()
		name := e.Name()
		top := filepath.Dir(path) == filepath.Clean(dir)
		_, isDict := segment.ParseDictName(name)
		_, isSeg := segment.ParseName(name)
		switch {
		case top && isSeg:
			used, size, ok, err := segmentUsed(path, n)
			if err != nil {
				return err
			}
			if !ok {
				return nil // removed since listed
			}
			d.Segments += used
			d.SegmentRoom += size - used
			n = size
		case top && isDict:
			d.Dictionaries += n
			d.DictionaryFiles++
		case filepath.Dir(path) == filepath.Join(filepath.Clean(dir), search.DirName):
			d.Search += n
		case top && name == "index.db":
			d.Index += n
		case top && (name == "LOCK" || name == "locks" || name == "shm" || strings.HasPrefix(name, "lease-")):
			d.Coordination += n
		default:
			d.Other += n
		}
		d.Total += n
		return nil
	})
	return d, err
}

// segmentUsed returns the end of the last frame of the segment at path,
// of size bytes as listed, and the file's size as it was measured (ok
// false: it was removed since). A file of another kind under a
// segment's name (an open quarantines it) counts as used whole.
func segmentUsed(path string, size int64) (used, n int64, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	var last [8]byte
	_, rerr := f.ReadAt(last[:], max(size-8, 0))
	f.Close()
	if rerr != nil || size <= segment.HeaderSize || !bytes.Equal(last[:], make([]byte, 8)) {
		return size, size, true, nil // ends with a frame (or is not one we read)
	}
	res, n, _, openErr, _ := scanSegment(path, func() {}, func(*segment.FrameInfo) error { return nil })
	switch {
	case errors.Is(openErr, fs.ErrNotExist):
		return 0, 0, false, nil
	case openErr != nil || res.End <= 0 || res.End > n:
		return size, size, true, nil
	}
	return res.End, n, true, nil
}
