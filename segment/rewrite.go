package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/seglog/seglog/vfs"
)

// rewriteSuffix names the file a rewrite is built in, next to the segment
// it replaces. List ignores it; a crash can leave one behind, which
// RemoveRewrites deletes.
const rewriteSuffix = ".rewrite"

// RewriteName returns the name of the temporary file in which a rewrite of
// segment id is built.
func RewriteName(id uint64) string { return Name(id) + rewriteSuffix }

// RewriteResult says what Rewrite wrote.
type RewriteResult struct {
	Header Header // of the new file: same ID and creation time, next generation
	Size   int64  // bytes of the new file
	// Moved maps the offset of every frame kept (the seal frame aside) to
	// its offset in the new file.
	Moved map[int64]int64
	// Recoded is the number of frames whose payload was compressed again
	// (RewriteOptions.Recode); RecodedFrom and RecodedTo their bytes on
	// disk before and after.
	Recoded                int
	RecodedFrom, RecodedTo int64
	// Sizes maps the offset of every recoded frame in the old file to its
	// sizes in the old file and the new one (the other frames keep theirs).
	Sizes map[int64]Resize
}

// Resize is a recoded frame's size before and after.
type Resize struct{ Old, New int64 }

// RewriteOptions says what RewriteWith keeps and how.
type RewriteOptions struct {
	// Keep says whether a frame stays (nil: every frame). Its FrameInfo
	// aliases the source's mapping and is valid only during the call.
	Keep func(*FrameInfo) bool
	// Recode compresses again, with zstd, each events frame kept whose
	// payload is an S2 block (CodecS2, CodecS2Dict: what a turn's flush
	// writes): with the dictionary its S2 form came from (CodecZstdDict),
	// or without one for CodecS2 (CodecZstd); a frame that would not get
	// smaller is copied as it is. A recoded frame keeps its kind, key,
	// first seq, count, raw payload and place in the order (what a frame's
	// identity is: the change feed's cursor and the index find it by it);
	// only its codec, stored bytes and size change. The payload is
	// decoded first: one that does not decode fails the rewrite with a
	// *CorruptionError, writing nothing.
	Recode bool
	// BeforeRename, if not nil, is called once the copy is synced and
	// before it is renamed, with what it holds: the place to record
	// durably what the rename will change. An error from it removes the
	// copy and is returned; nothing was renamed.
	BeforeRename func(*RewriteResult) error
}

// Recodable reports whether RewriteOptions.Recode compresses a frame of
// codec c again.
func Recodable(k Kind, c Codec) bool {
	return k == KindEvents && (c == CodecS2 || c == CodecS2Dict)
}

// ErrRewriteDir is the kind of the error Rewrite returns when the rename
// of the new file may have happened but could not be made durable: the
// directory sync failed. The caller must treat the store as failed (the
// file under the segment's name is the old or the new one, and which one a
// crash leaves is unknown), never retry the sync.
var ErrRewriteDir = errors.New("segment: rewrite: directory sync failed")

// Rewrite replaces the sealed segment src (in directory dir) by a copy
// that holds only the frames keep accepts, in their order, and a new seal
// frame. The copy has the same ID and creation time, format
// RewriteVersion (DictVersion for a segment of that version: its frames
// may name dictionaries, which stay as they are) and the next generation;
// its frames have the same bytes (RewriteWith may compress S2 ones again)
// but their offsets and write bases change (every frame's base is the end
// of the header: the file is synced whole before it gets its name).
//
// The copy is built in RewriteName(id), synced, renamed over the segment
// and the directory synced, so a crash leaves either the old file or the
// new one under the segment's name, each complete. src keeps reading the
// old file until it is closed. keep's FrameInfo aliases src's mapping and
// is valid only during the call.
//
// beforeRename, if not nil, is called once the copy is synced and before
// it is renamed, with what it holds: the place to record durably what the
// rename will change. An error from it removes the copy and is returned;
// nothing was renamed.
func Rewrite(fsys vfs.FS, dir string, src *Reader, keep func(*FrameInfo) bool, beforeRename func(*RewriteResult) error) (*RewriteResult, error) {
	return RewriteWith(fsys, dir, src, RewriteOptions{Keep: keep, BeforeRename: beforeRename})
}

// RewriteWith is Rewrite with options: the frames opts.Keep accepts,
// recoded with opts.Recode.
func RewriteWith(fsys vfs.FS, dir string, src *Reader, opts RewriteOptions) (*RewriteResult, error) {
	keep, beforeRename := opts.Keep, opts.BeforeRename
	if keep == nil {
		keep = func(*FrameInfo) bool { return true }
	}
	fsys = orDefault(fsys)
	hdr := src.Header()
	path := filepath.Join(dir, Name(hdr.ID))
	tmp := filepath.Join(dir, RewriteName(hdr.ID))
	if err := src.Remap(); err != nil {
		return nil, err
	}
	src.mu.RLock()
	data := src.data
	src.mu.RUnlock()
	res := &RewriteResult{
		Header: Header{Version: max(hdr.Version, RewriteVersion), ID: hdr.ID, CreatedNs: hdr.CreatedNs, Generation: hdr.Generation + 1},
		Moved:  map[int64]int64{},
		Sizes:  map[int64]Resize{},
	}
	if err := fsys.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	f, err := fsys.Create(tmp)
	if err != nil {
		return nil, err
	}
	// discard removes the unfinished file after err (a crash would leave
	// it for RemoveRewrites).
	discard := func(err error) (*RewriteResult, error) {
		if rerr := fsys.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	fail := func(err error) (*RewriteResult, error) {
		f.Close()
		return discard(err)
	}
	const chunk = 1 << 20
	buf := appendHeader(make([]byte, 0, chunk+HeaderSize), res.Header)
	var written int64 // bytes of the new file already handed to f
	flush := func() error {
		if _, err := f.WriteAt(buf, written); err != nil {
			return err
		}
		written += int64(len(buf))
		buf = buf[:0]
		return nil
	}
	var events uint32
	scan, err := Scan(src.Path(), data, ScanOptions{}, func(fi *FrameInfo) error {
		if fi.Kind == KindSeal || !keep(fi) {
			return nil
		}
		at := written + int64(len(buf))
		res.Moved[fi.Offset] = at
		n := len(buf)
		if opts.Recode && Recodable(fi.Kind, fi.Codec) {
			b, ok, err := recode(src, data, fi, buf)
			if err != nil {
				return err
			}
			if ok {
				buf = b
				res.Recoded++
				res.RecodedFrom += fi.Size
				res.RecodedTo += int64(len(buf) - n)
				res.Sizes[fi.Offset] = Resize{Old: fi.Size, New: int64(len(buf) - n)}
				if fi.Kind == KindEvents {
					events++
				}
				if len(buf) >= chunk {
					return flush()
				}
				return nil
			}
		}
		buf = append(buf, data[fi.Offset:fi.End()]...)
		rebase(buf[n:], HeaderSize)
		if fi.Kind == KindEvents {
			events++
		}
		if len(buf) >= chunk {
			return flush()
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	if !scan.Sealed {
		return fail(&CorruptionError{Path: src.Path(), Offset: scan.End, Reason: "rewrite of a segment that is not sealed"})
	}
	n := len(buf)
	buf = append(buf, make([]byte, frameSize(0, 0))...)
	putFrame(buf[n:], KindSeal, CodecNone, nil, nil, 0, 0, events, HeaderSize)
	if err := flush(); err != nil {
		return fail(err)
	}
	res.Size = written
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return discard(err)
	}
	if beforeRename != nil {
		if err := beforeRename(res); err != nil {
			return discard(err)
		}
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return discard(err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRewriteDir, dir, err)
	}
	return res, nil
}

// rebase sets the write base of the complete frame in b and recomputes its
// checksum.
func rebase(b []byte, base int64) {
	binary.LittleEndian.PutUint32(b[28:], uint32(base))
	binary.LittleEndian.PutUint64(b[32:], frameSum(b))
}

// recode appends to dst the frame fi of src (whose mapping is data)
// compressed again with zstd (see RewriteOptions.Recode), as part of a
// write at HeaderSize; ok is false, and dst unchanged, if that would not
// make it smaller.
func recode(src *Reader, data []byte, fi *FrameInfo, dst []byte) (_ []byte, ok bool, err error) {
	stored := data[fi.Offset+frameHeaderSize+int64(len(fi.Key)):][:fi.StoredLen]
	raw, err := decodePayload(src.Path(), fi.Offset, fi, stored, src.dicts)
	if err != nil {
		return dst, false, err
	}
	var c Encoder
	c.MinCompress = -1
	if fi.Codec == CodecS2Dict {
		// The same dictionary: a recoded frame names no dictionary the
		// segment did not name before.
		if c.Dict, err = src.dicts.Get(fi.Dict); err != nil {
			return dst, false, err
		}
	}
	e := c.encode(KindEvents, CodecZstd, string(fi.Key), raw, fi.FirstSeq, fi.Count)
	defer e.Release()
	if e.Size() >= fi.Size {
		return dst, false, nil
	}
	return e.AppendFrame(dst, HeaderSize), true, nil
}
