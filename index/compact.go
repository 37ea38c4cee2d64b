package index

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// CompactSuffix names the file Compact writes beside the index
// (<index>.compact) before it renames it over the index.
const CompactSuffix = ".compact"

// Compact rewrites the index file at path densely, if that makes it
// smaller: bbolt's Compact copies every bucket, key and value into a new
// file whose pages are full and which holds no free page (the index as
// the commits leave it carries their free pages and half-full pages, and
// bbolt's growth step), cut to its last page in use and synced, then
// renamed over path, and the directory
// synced. It returns the file's size before and after (the same if it
// left the file as it was).
//
// The caller must know that no process uses the index meanwhile (the
// engine calls it from the last close of a store, holding the store's
// locks exclusive). A crash at any moment leaves the old file or the new
// one under path, both whole, with the same contents, and maybe the
// temporary (removed by the next Compact). A failure leaves path as it
// was.
func Compact(path string) (before, after int64, err error) {
	tmp := path + CompactSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, 0, fmt.Errorf("index: compact: %w", err)
	}
	src, err := Open(path, &Options{ReadOnly: true, NoCheck: true})
	if err != nil {
		return 0, 0, err
	}
	defer src.Close()
	fi, err := src.file.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("index: compact: %w", err)
	}
	before = fi.Size()
	dst, err := bolt.Open(tmp, 0o644, &bolt.Options{FreelistType: bolt.FreelistMapType})
	if err != nil {
		return before, before, fmt.Errorf("index: compact: %w", err)
	}
	err = src.do("compact", nil, func() error { return bolt.Compact(dst, src.db, 0) })
	if err == nil {
		// bbolt sized the copy to its mapping, which it doubles as the
		// copy grows: up to half of it past the last page in use (the
		// high-water mark), which is cut off.
		err = dst.View(func(tx *bolt.Tx) error { after = tx.Size(); return nil })
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = truncateSync(tmp, after)
	}
	if err == nil && after < before {
		// (bbolt synced each commit of the copy: the file is whole on
		// disk before its name replaces the index's)
		err = os.Rename(tmp, path)
		if err == nil {
			err = syncDir(filepath.Dir(path))
			return before, after, err
		}
	}
	os.Remove(tmp)
	if err != nil {
		return before, before, fmt.Errorf("index: compact %s: %w", path, err)
	}
	return before, before, nil
}

// truncateSync cuts the file at path to size and syncs it.
func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() <= size {
		return err
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Sync()
}

// syncDir makes the directory entries of dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
