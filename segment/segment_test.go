package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/vfs"
)

func TestRoundTrip(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		for _, codec := range []string{"zstd", "none"} {
			t.Run("fs="+fsName+"/codec="+codec, func(t *testing.T) {
				var fsys vfs.FS = vfs.NewMem()
				dir := "/"
				if fsName == "os" {
					fsys, dir = vfs.Default, t.TempDir()
				}
				path := filepath.Join(dir, "1.seg")
				o := smallOpts()
				o.Uncompressed = codec == "none"
				w := mustCreate(t, fsys, path, o)
				batches := [][]event.Event{makeEvents(0, 1, 300), makeEvents(1, 10, 300), makeEvents(0, 3, 2000), makeEvents(11, 2, 50)}
				keys := []string{"s-1", "s-1", "s-2", "s-1"}
				var locs []Location
				for i, b := range batches {
					locs = append(locs, mustAppend(t, w, keys[i], b))
				}
				mustSync(t, w)
				if got := w.Durable(); got != w.Size() {
					t.Errorf("Durable() = %d after Sync, want Size() %d", got, w.Size())
				}
				r, err := OpenReader(fsys, path)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if r.Header().ID != 1 || r.Header().Version != Version {
					t.Errorf("header = %+v", r.Header())
				}
				var infos []FrameInfo
				res, err := r.Scan(ScanOptions{}, func(fi *FrameInfo) error {
					c := *fi
					c.Key = bytes.Clone(fi.Key)
					infos = append(infos, c)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if res.Torn || res.Sealed || res.Frames != 4 || res.End != w.Size() {
					t.Errorf("Scan = %+v, want 4 frames ending at %d", res, w.Size())
				}
				for i, fi := range infos {
					if fi.Offset != locs[i].Offset || fi.Size != locs[i].Size || string(fi.Key) != keys[i] || fi.FirstSeq != batches[i][0].Seq || int(fi.Count) != len(batches[i]) {
						t.Errorf("frame %d info = %+v, want at %+v", i, fi, locs[i])
					}
					if codec == "none" && fi.Codec != CodecNone {
						t.Errorf("frame %d codec %v with Uncompressed", i, fi.Codec)
					}
				}
				if codec == "zstd" && infos[1].Codec != CodecZstd {
					t.Errorf("10 similar events were not compressed")
				}
				if codec == "zstd" && infos[0].Codec != CodecNone {
					t.Errorf("a one-event frame (under DefaultMinCompress) was compressed")
				}
				for i, b := range batches {
					f, err := r.ReadFrame(locs[i].Offset)
					if err != nil {
						t.Fatal(err)
					}
					if f.Session != keys[i] {
						t.Errorf("frame %d session %q", i, f.Session)
					}
					if diff := cmp.Diff(b, f.Events); diff != "" {
						t.Errorf("frame %d events mismatch (-want +got):\n%s", i, diff)
					}
				}
			})
		}
	}
}

// Events must not alias the mapping: after Close (munmap) they are still
// readable, and a later change to the file does not show through them.
func TestEventsDoNotAliasMapping(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		t.Run("fs="+fsName, func(t *testing.T) {
			var fsys vfs.FS = vfs.NewMem()
			dir := "/"
			if fsName == "os" {
				fsys, dir = vfs.Default, t.TempDir()
			}
			path := filepath.Join(dir, "1.seg")
			o := smallOpts()
			o.Uncompressed = true // the payload is in the mapping verbatim
			w := mustCreate(t, fsys, path, o)
			want := makeEvents(0, 4, 200)
			loc := mustAppend(t, w, "s", want)
			mustSync(t, w)
			r, err := OpenReader(fsys, path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := r.ReadFrame(loc.Offset)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			// Overwrite the frame in the file.
			rw, err := fsys.OpenReadWrite(path)
			if err != nil {
				t.Fatal(err)
			}
			rw.WriteAt(bytes.Repeat([]byte{'X'}, int(loc.Size)), loc.Offset)
			rw.Close()
			if diff := cmp.Diff(want, f.Events); diff != "" {
				t.Errorf("events changed after Close and overwrite (-want +got):\n%s", diff)
			}
			if _, err := r.ReadFrame(loc.Offset); !errors.Is(err, ErrClosed) {
				t.Errorf("ReadFrame after Close = %v, want ErrClosed", err)
			}
		})
	}
}

func TestHeaderValidation(t *testing.T) {
	good := appendHeader(nil, Header{Version: Version, ID: 7, CreatedNs: 42})
	if h, err := DecodeHeader("x", good); err != nil || h.ID != 7 || h.CreatedNs != 42 || h.Generation != 0 {
		t.Fatalf("DecodeHeader(good) = %+v, %v", h, err)
	}
	for _, v := range []int{RewriteVersion, DictVersion} {
		rewritten := appendHeader(nil, Header{Version: v, ID: 7, CreatedNs: 42, Generation: 3})
		if h, err := DecodeHeader("x", rewritten); err != nil || h.Version != v || h.Generation != 3 {
			t.Fatalf("DecodeHeader(rewritten, version %d) = %+v, %v", v, h, err)
		}
	}
	withVersion := func(v uint16) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint16(b[8:], v)
		return b
	}
	resum := func(b []byte) []byte { // re-seal the header checksum after an edit
		binary.LittleEndian.PutUint64(b[56:], xxhashSum(b[:56]))
		return b
	}
	reserved := bytes.Clone(good)
	reserved[40] = 1
	tests := []struct {
		name      string
		b         []byte
		wantNewer *bool
		wantCorr  bool
	}{
		{name: "newer version", b: withVersion(NewestVersion + 1), wantNewer: ptr(true)},
		{name: "generation in version 1", b: resum(func() []byte { b := withVersion(1); b[32] = 1; return b }()), wantCorr: true},
		{name: "version 2 without generation", b: resum(withVersion(RewriteVersion)), wantCorr: true},
		{name: "older version", b: withVersion(0), wantNewer: ptr(false)},
		{name: "bad magic", b: append([]byte("SEGLOG!!"), good[8:]...), wantCorr: true},
		{name: "short", b: good[:20], wantCorr: true},
		{name: "checksum", b: func() []byte { b := bytes.Clone(good); b[20] ^= 1; return b }(), wantCorr: true},
		{name: "reserved set, checksum fixed", b: resum(reserved), wantCorr: true},
		{name: "reserved set in 12..16", b: resum(func() []byte { b := bytes.Clone(good); b[13] = 9; return b }()), wantCorr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeHeader("seg", tt.b)
			var fe *FormatError
			var ce *CorruptionError
			switch {
			case tt.wantNewer != nil:
				if !errors.As(err, &fe) || fe.Newer() != *tt.wantNewer || fe.Path != "seg" {
					t.Errorf("err = %v, want *FormatError with Newer()=%v", err, *tt.wantNewer)
				}
			case tt.wantCorr:
				if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Offset != 0 {
					t.Errorf("err = %v, want *CorruptionError at offset 0", err)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestEncoderLimits: an Encoder refuses an empty key, one longer than
// MaxKeyLen and a batch whose encoding exceeds MaxFrameRaw (ErrTooLarge);
// Create refuses a segment size outside the format's bounds.
func TestEncoderLimits(t *testing.T) {
	enc := Encoder{Uncompressed: true}
	if _, err := enc.Events("", 0, makeEvents(0, 1, 10)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("empty key: %v", err)
	}
	if _, err := enc.Events(string(make([]byte, MaxKeyLen+1)), 0, makeEvents(0, 1, 10)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("long key: %v", err)
	}
	if _, err := (Encoder{MaxFrameRaw: 1000}).Events("s", 0, makeEvents(0, 1, 2000)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("frame over MaxFrameRaw: %v", err)
	}
	if err := Create(vfs.NewMem(), "/3.seg", 1, CreateOptions{Size: 10}); err == nil {
		t.Error("bad options accepted")
	}
}

func TestSealAndPreallocate(t *testing.T) {
	fsys := vfs.NewMem()
	o := smallOpts()
	o.Preallocate = true
	w := mustCreate(t, fsys, "/1.seg", o)
	if f, _ := fsys.Open("/1.seg"); f != nil {
		if n, _ := f.Size(); n != o.Size {
			t.Errorf("preallocated size = %d, want %d", n, o.Size)
		}
		f.Close()
	}
	mustAppend(t, w, "s", makeEvents(0, 3, 100))
	mustSync(t, w)
	res, err := Scan("1.seg", readAll(t, fsys, "/1.seg"), ScanOptions{}, nil)
	if err != nil || res.Torn || res.End != w.Size() || res.DirtyEnd != res.End {
		t.Fatalf("scan of preallocated segment = %+v, %v", res, err)
	}
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	data := readAll(t, fsys, "/1.seg")
	if int64(len(data)) != w.Size() {
		t.Errorf("sealed file is %d bytes, want trimmed to %d", len(data), w.Size())
	}
	res, err = Scan("1.seg", data, ScanOptions{}, nil)
	if err != nil || !res.Sealed || res.Frames != 1 {
		t.Fatalf("scan of sealed segment = %+v, %v", res, err)
	}
	// Anything after the seal is corruption.
	bad := append(bytes.Clone(data), 1, 2, 3, 4, 5, 6, 7, 8)
	var ce *CorruptionError
	if _, err := Scan("1.seg", bad, ScanOptions{}, nil); !errors.As(err, &ce) || ce.Offset != int64(len(data)) {
		t.Errorf("data after seal: %v", err)
	}
}

func TestCreatedTimeFromClock(t *testing.T) {
	at := time.Unix(1000, 5)
	w := mustCreate(t, vfs.NewMem(), "/1.seg", writerOpts{Now: func() time.Time { return at }})
	if w.Header().CreatedNs != at.UnixNano() {
		t.Errorf("CreatedNs = %d", w.Header().CreatedNs)
	}
}

func TestMinCompress(t *testing.T) {
	evs := makeEvents(0, 2, 300)
	raw := len(appendEvents(nil, evs))
	for _, tc := range []struct {
		min  int
		want Codec
	}{
		{0, CodecNone},       // default: raw < DefaultMinCompress
		{-1, CodecZstd},      // compress everything
		{raw, CodecZstd},     // at the threshold
		{raw + 1, CodecNone}, // just under it
		{DefaultMinCompress, CodecNone},
	} {
		e, err := Encoder{MinCompress: tc.min}.Events("s", 0, evs)
		if err != nil {
			t.Fatal(err)
		}
		if e.codec != tc.want {
			t.Errorf("MinCompress %d, raw %d: codec %v, want %v", tc.min, raw, e.codec, tc.want)
		}
	}
}

// TestRemapAfterSealTrim: a reader opened on a preallocated segment maps
// its full size; Seal trims the file, and Remap must shrink the mapping,
// or a Scan of it touches pages past the end (SIGBUS on a real file).
func TestRemapAfterSealTrim(t *testing.T) {
	path := filepath.Join(t.TempDir(), Name(1))
	w := mustCreate(t, vfs.Default, path, writerOpts{Size: 1 << 20, Preallocate: true})
	mustAppend(t, w, "s", makeEvents(0, 3, 100))
	mustSync(t, w)
	r, err := OpenReader(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Size() != 1<<20 {
		t.Fatalf("mapped %d bytes of a preallocated segment", r.Size())
	}
	if err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	if err := r.Remap(); err != nil {
		t.Fatal(err)
	}
	if r.Size() != w.Size() {
		t.Fatalf("after Seal and Remap the mapping is %d bytes, the file %d", r.Size(), w.Size())
	}
	res, err := r.Scan(ScanOptions{}, nil)
	if err != nil || !res.Sealed || res.Frames != 1 {
		t.Fatalf("Scan after Remap = %+v, %v", res, err)
	}
}
