package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"
)

// testDict trains a dictionary from generated events' payloads.
func testDict(t testing.TB, id uint32) *Dict {
	t.Helper()
	var samples [][]byte
	for i := range 300 {
		samples = append(samples, appendEvents(nil, makeEvents(uint64(i), 1+i%4, 200+i%700)))
	}
	d, err := TrainDict(id, 7, samples, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A dictionary file reads back as written, compresses and decompresses a
// payload, and any change to one of its bytes (or a file name that does
// not name its ID) is refused: a *FormatError for another version, a
// corruption error at the file for the rest, never a dictionary.
func TestDictFile(t *testing.T) {
	d := testDict(t, 0x9abc)
	file := d.marshal()
	path := filepath.Join("dir", DictName(d.ID))
	got, err := ParseDict(path, file)
	if err != nil || got.ID != d.ID || got.Created != 7 || !bytes.Equal(got.data, d.data) {
		t.Fatalf("parse: %+v, %v", got, err)
	}
	raw := appendEvents(nil, makeEvents(3, 2, 300))
	c, err := d.compress(nil, raw)
	if err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(c) != d.ID {
		t.Fatal("payload does not start with the dictionary's ID")
	}
	back, err := got.decompress(c[4:], len(raw))
	if err != nil || !bytes.Equal(back, raw) {
		t.Fatalf("round trip: %v", err)
	}
	if _, err := got.decompress(c[4:], len(raw)+1); err == nil {
		t.Fatal("a payload of another raw length decoded")
	}
	for i := range file {
		bad := bytes.Clone(file)
		bad[i] ^= 0x20
		_, err := ParseDict(path, bad)
		var fe *FormatError
		switch {
		case err == nil:
			t.Fatalf("byte %d changed: parsed", i)
		case i == 8 || i == 9:
			if !errors.As(err, &fe) {
				t.Fatalf("byte %d (version) changed: %v, want a FormatError", i, err)
			}
		case !errors.Is(err, ErrCorrupt):
			t.Fatalf("byte %d changed: %v, want corruption", i, err)
		}
	}
	for _, n := range []int{0, 9, dictHeaderSize - 1, len(file) - 1} {
		if _, err := ParseDict(path, file[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("file cut at %d: %v", n, err)
		}
	}
	for _, name := range []string{DictName(d.ID + 1), "x.dict", "0000.dict"} {
		if _, err := ParseDict(filepath.Join("dir", name), file); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("file named %s: %v", name, err)
		}
	}
}

// FuzzDictFile: a dictionary file whose header and checksum are right
// but whose zstd dictionary is anything (a hostile or damaged file that
// the checksum does not catch) is refused or decodes payloads without a
// panic; whatever it compresses it decompresses to the same bytes.
func FuzzDictFile(f *testing.F) {
	d := testDict(f, 0x9abc)
	raw := appendEvents(nil, makeEvents(3, 2, 300))
	c, err := d.compress(nil, raw)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(d.data, c[4:])
	f.Add(d.data[:64], c[4:])
	f.Add([]byte{0x37, 0xa4, 0x30, 0xec, 0xbc, 0x9a, 0, 0}, []byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Fuzz(func(t *testing.T, data, payload []byte) {
		id := uint32(0x9abc)
		if len(data) >= 8 {
			id = binary.LittleEndian.Uint32(data[4:]) // (the zstd dictionary's own, so that the file passes that check)
		}
		if id == 0 {
			id = 1
		}
		file := (&Dict{ID: id, Created: 1, data: data}).marshal()
		got, err := ParseDict(filepath.Join("dir", DictName(id)), file)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("non-corruption error: %v", err)
			}
			return
		}
		defer closeDict(got) // (each input's coders would otherwise stay: ~1 MiB each)
		// Decoders and encoders may refuse the dictionary; they must not
		// panic, and what they accept must round-trip.
		_, _ = got.decompress(payload, 4*len(payload)+64)
		if c, err := got.compress(nil, raw); err == nil {
			if back, err := got.decompress(c[4:], len(raw)); err != nil || !bytes.Equal(back, raw) {
				t.Fatalf("round trip with an accepted dictionary: %v", err)
			}
		}
	})
}

// closeDict releases d's encoders and decoder.
func closeDict(d *Dict) {
	if d.small.enc != nil {
		d.small.enc.Close()
	}
	if d.large.enc != nil {
		d.large.enc.Close()
	}
	if d.dec != nil {
		d.dec.Close()
	}
}
