package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/seglog/seglog/vfs"
)

// CreateOptions configures Create. The zero value is valid: a 64 MiB
// segment, no preallocation.
type CreateOptions struct {
	// Size is the size the segment is sealed at (by its writer); default
	// 64 MiB, at most MaxSegmentSize. Create only checks it and
	// preallocates up to it.
	Size int64
	// Preallocate fills the file with zeros up to PreallocSize when it is
	// created (and synced), so that later data syncs overwrite allocated
	// blocks and need not commit a new file size. If the file system has
	// no room for it (ENOSPC), the segment is created without it and
	// grows as it is written.
	Preallocate bool
	// PreallocSize, with Preallocate, is how far the zero fill goes, if
	// less than Size: the writer grows the file ahead of its appends (as
	// the engine does). Default Size.
	PreallocSize int64
	// Now is the clock for the header's creation time; default time.Now.
	Now func() time.Time
}

const (
	defaultSegmentSize = 64 << 20
	zeroChunk          = 1 << 20
)

func (o CreateOptions) withDefaults() (CreateOptions, error) {
	if o.Size == 0 {
		o.Size = defaultSegmentSize
	}
	if o.PreallocSize <= 0 || o.PreallocSize > o.Size {
		o.PreallocSize = o.Size
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Size < HeaderSize+frameHeaderSize || o.Size > MaxSegmentSize {
		return o, fmt.Errorf("segment: Size %d outside [%d, %d]", o.Size, HeaderSize+frameHeaderSize, MaxSegmentSize)
	}
	return o, nil
}

// Create creates the segment file path with the given ID: it builds the
// file under TempName, writes and syncs its header (and the zero fill,
// with Preallocate), renames it into place and syncs the directory. So a
// file under a segment's name always starts with a valid header, and
// what a crash or a failure (a full disk) leaves of an unfinished
// creation is a temporary file, removed on failure and by the engine's
// next open. It fails with an error satisfying errors.Is(err,
// fs.ErrExist) if path exists, and with ErrSyncFailed if the sync of the
// directory failed (the directory may or may not hold the segment). A nil
// fsys means the operating system's file system.
//
// Frames are written by the engine's writer (engine/internal/wal) with
// Encoded.AppendFrame and AppendSeal.
func Create(fsys vfs.FS, path string, id uint64, opts CreateOptions) error {
	fsys = orDefault(fsys)
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if f, err := fsys.Open(path); err == nil {
		f.Close()
		return fmt.Errorf("segment: create %s: %w", path, fs.ErrExist)
	}
	tmp := path + createSuffix
	if err := fsys.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("segment: create %s: %w", path, err)
	}
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("segment: create %s: %w", path, err)
	}
	hdr := Header{Version: Version, ID: id, CreatedNs: o.Now().UnixNano()}
	if f, err = initFile(fsys, f, tmp, path, hdr, o); err != nil {
		f.Close()
		if rerr := fsys.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("segment: create %s: %w", path, err)
	}
	return f.Close()
}

// initFile writes the new segment's header (and zero fill) into f, the
// file tmp, syncs it, renames it to path and syncs the directory. It
// returns the file open under its own name (errors then name it), or f.
func initFile(fsys vfs.FS, f vfs.File, tmp, path string, hdr Header, o CreateOptions) (vfs.File, error) {
	if _, err := f.WriteAt(appendHeader(nil, hdr), 0); err != nil {
		return f, err
	}
	if o.Preallocate {
		if err := zeroFill(f, HeaderSize, o.PreallocSize); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return f, err
			}
			// No room for the whole segment: this one grows as it is
			// written (slower flushes, but the store goes on).
			if err := f.Truncate(HeaderSize); err != nil {
				return f, err
			}
		}
	}
	if err := f.Sync(); err != nil {
		return f, err // only the temporary file is affected
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return f, err
	}
	if g, err := fsys.OpenReadWrite(path); err == nil {
		f.Close()
		f = g
	}
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		return f, fmt.Errorf("%w: %w", ErrSyncFailed, err)
	}
	return f, nil
}

func zeroFill(f vfs.File, from, to int64) error {
	zeros := make([]byte, min(zeroChunk, max(to-from, 0)))
	for off := from; off < to; {
		n := min(int64(len(zeros)), to-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// createSuffix names the file a segment is created in before it is
// renamed into place (see Create).
const createSuffix = ".create"

// TempName returns the name under which Create builds segment id.
func TempName(id uint64) string { return Name(id) + createSuffix }

// IsTemporary reports whether name is a file that Create, Rewrite or
// WriteDict builds before renaming it into place (TempName, RewriteName):
// one that a crash left behind never held anything acknowledged.
func IsTemporary(name string) bool {
	for _, suffix := range []string{createSuffix, rewriteSuffix} {
		if seg, ok := strings.CutSuffix(name, suffix); ok {
			if _, ok := ParseName(seg); ok {
				return true
			}
		}
	}
	if dict, ok := strings.CutSuffix(name, dictTempSuffix); ok {
		_, ok = ParseDictName(dict)
		return ok
	}
	return false
}

func orDefault(fsys vfs.FS) vfs.FS {
	if fsys == nil {
		return vfs.Default
	}
	return fsys
}
