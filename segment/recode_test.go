package segment

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"os"

	"github.com/seglog/seglog/vfs"
)

// recodeSegment writes a sealed segment of S2 frames (with d's S2 form
// for the sessions named "dict-…", without for the others), a zstd frame,
// a small frame stored as is, a header and a tombstone, and returns its
// path.
func recodeSegment(t *testing.T, dir string, d *Dict) string {
	t.Helper()
	path := filepath.Join(dir, Name(1))
	w := mustCreate(t, nil, path, writerOpts{})
	put := func(enc Encoder, key string, first uint64, n, size int) {
		e, err := enc.Events(key, first, makeEvents(first, n, size))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.AppendEncoded(e); err != nil {
			t.Fatal(err)
		}
	}
	h, err := Encoder{}.Header("dict-a", []byte(`{"id":"dict-a"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendEncoded(h); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		put(Encoder{Fast: true, Dict: d}, "dict-a", uint64(i*5), 5, 400)
		put(Encoder{Fast: true}, "plain-b", uint64(i*8), 8, 300)
	}
	put(Encoder{}, "zstd-c", 0, 10, 300)                 // zstd already: copied
	put(Encoder{Fast: true, Dict: d}, "tiny-d", 0, 1, 1) // under MinDictCompress: as is
	tomb, err := Encoder{}.Delete("gone-e", 42)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendEncoded(tomb); err != nil {
		t.Fatal(err)
	}
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	return path
}

type frameID struct {
	kind  Kind
	key   string
	first uint64
	count uint32
	raw   uint32
}

func frameIDs(t *testing.T, rd *Reader) ([]frameID, []*FrameInfo) {
	t.Helper()
	var ids []frameID
	var fis []*FrameInfo
	if _, err := rd.Scan(ScanOptions{}, func(fi *FrameInfo) error {
		if fi.Kind != KindSeal {
			ids = append(ids, frameID{fi.Kind, string(fi.Key), fi.FirstSeq, fi.Count, fi.RawLen})
			c := *fi
			c.Key = nil
			fis = append(fis, &c)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ids, fis
}

// TestRewriteRecode: a rewrite with Recode makes every S2 frame zstd
// (with the dictionary its S2 form came from, or without one), keeps
// each frame's identity (kind, key, first seq, count, raw payload, order)
// and every other frame's bytes, and the segment gets smaller; each
// recoded frame reads back as the same events.
func TestRewriteRecode(t *testing.T) {
	dir := t.TempDir()
	d := testDict(t, 0x5eed)
	if err := WriteDict(nil, dir, d); err != nil {
		t.Fatal(err)
	}
	path := recodeSegment(t, dir, d)
	dicts := NewDicts(nil, dir)
	rd, err := OpenReaderDicts(nil, path, dicts)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	before, beforeFI := frameIDs(t, rd)
	var want []*Frame
	for _, fi := range beforeFI {
		if fi.Kind == KindDelete {
			want = append(want, nil)
			continue
		}
		f, err := rd.ReadFrame(fi.Offset)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, f)
	}
	size := rd.Size()
	res, err := RewriteWith(nil, dir, rd, RewriteOptions{Recode: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Recoded != 40 || res.Size >= size || res.RecodedTo >= res.RecodedFrom {
		t.Fatalf("recoded %d frames (%d -> %d bytes), file %d -> %d bytes; want 40 frames, smaller", res.Recoded, res.RecodedFrom, res.RecodedTo, size, res.Size)
	}
	nr, err := OpenReaderDicts(nil, path, dicts)
	if err != nil {
		t.Fatal(err)
	}
	defer nr.Close()
	if nr.Header().Version != S2Version || nr.Header().Generation != 1 {
		t.Fatalf("header %+v", nr.Header())
	}
	after, afterFI := frameIDs(t, nr)
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("frames changed identity:\n%v\n%v", before, after)
	}
	for i, fi := range afterFI {
		old := beforeFI[i]
		if res.Moved[old.Offset] != fi.Offset {
			t.Fatalf("frame %d: moved to %d, Moved says %d", i, fi.Offset, res.Moved[old.Offset])
		}
		wantCodec := old.Codec
		switch old.Codec {
		case CodecS2:
			wantCodec = CodecZstd
		case CodecS2Dict:
			wantCodec = CodecZstdDict
		}
		if fi.Codec != wantCodec || wantCodec == CodecZstdDict && fi.Dict != d.ID {
			t.Fatalf("frame %d (%v of %s): codec %v dict %08x after the recode, want %v", i, old.Codec, after[i].key, fi.Codec, fi.Dict, wantCodec)
		}
		if !Recodable(old.Kind, old.Codec) && (fi.Size != old.Size || fi.StoredLen != old.StoredLen) {
			t.Fatalf("frame %d (%v) changed: %d -> %d bytes", i, old.Codec, old.Size, fi.Size)
		}
		if want[i] == nil {
			continue
		}
		f, err := nr.ReadFrame(fi.Offset)
		if err != nil {
			t.Fatal(err)
		}
		if !equalEvents(f.Events, want[i].Events) || string(f.Payload) != string(want[i].Payload) {
			t.Fatalf("frame %d reads back differently after the recode", i)
		}
	}
	// A second recode finds nothing to do and keeps every byte.
	res2, err := RewriteWith(nil, dir, nr, RewriteOptions{Recode: true})
	if err != nil || res2.Recoded != 0 || res2.Size != res.Size {
		t.Fatalf("second recode: %+v, %v", res2, err)
	}
}

// TestRewriteRecodeCorrupt: an S2 payload that does not decode (its
// checksum made to match) fails the recode with a *CorruptionError at the
// frame, and the segment stays as it was, with no temporary left.
func TestRewriteRecodeCorrupt(t *testing.T) {
	dir := t.TempDir()
	d := testDict(t, 0x5eed)
	if err := WriteDict(nil, dir, d); err != nil {
		t.Fatal(err)
	}
	path := recodeSegment(t, dir, d)
	data := readAll(t, vfs.Default, path)
	rd0, err := OpenReader(nil, path)
	if err != nil {
		t.Fatal(err)
	}
	_, fis := frameIDs(t, rd0)
	rd0.Close()
	var bad *FrameInfo
	for _, fi := range fis {
		if fi.Codec == CodecS2 {
			bad = fi
			break
		}
	}
	// Damage the length the block declares (its first byte), then make
	// the frame's checksum match.
	at := bad.Offset + frameHeaderSize + int64(len("plain-b"))
	data[at] ^= 0x01
	rebase(data[bad.Offset:bad.End()], bad.Base)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rd, err := OpenReaderDicts(nil, path, NewDicts(nil, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	_, err = RewriteWith(nil, dir, rd, RewriteOptions{Recode: true})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Offset != bad.Offset {
		t.Fatalf("recode of a damaged S2 frame at %d: %v, want a *CorruptionError there", bad.Offset, err)
	}
	if got := readAll(t, vfs.Default, path); string(got) != string(data) {
		t.Fatal("the segment changed")
	}
	if _, err := os.Stat(filepath.Join(dir, RewriteName(1))); err == nil {
		t.Fatal("the rewrite's temporary was left")
	}
}
