package segment

import (
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/seglog/seglog/vfs"
)

// A store's zstd dictionaries live beside its segments, one file per
// dictionary ID (docs/FORMAT.md, Dictionary file):
//
//	0        8        10       12        16        24         32        40
//	+--------+--------+--------+---------+---------+----------+---------+----------------------+
//	| magic  | version| hdrlen | dict ID | length  | created  | xxh64   | zstd dictionary ...  |
//	+--------+--------+--------+---------+---------+----------+---------+----------------------+
//
// The checksum covers header bytes [0,32) and the dictionary. A frame of
// codec CodecZstdDict names its dictionary by ID; the file is written,
// synced, renamed into place and the directory synced before any frame
// names it (WriteDict), and never changes afterwards.

// Part of the on-disk format; never change.
const (
	dictHeaderSize = 40
	// DictFileVersion is the version of the dictionary file format.
	DictFileVersion = 1
	dictSuffix      = ".dict"
	dictTempSuffix  = ".tmp"
)

// dictMagic starts every dictionary file.
var dictMagic = [8]byte{0x89, 'S', 'G', 'D', 'I', 'C', 'T', '\n'}

// MaxDictLen bounds a dictionary file's dictionary (zstd's own limit on a
// dictionary's content is about this).
const MaxDictLen = 1 << 20

// DictName returns the file name of dictionary id.
func DictName(id uint32) string { return fmt.Sprintf("%08x%s", id, dictSuffix) }

// ParseDictName returns the ID in a dictionary file name made by DictName.
func ParseDictName(name string) (uint32, bool) {
	hex, ok := strings.CutSuffix(name, dictSuffix)
	if !ok || len(hex) != 8 || strings.ToLower(hex) != hex {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 32)
	return uint32(id), err == nil && id != 0
}

// Dict is a zstd dictionary of a store. Its encoder and decoder are made
// on first use and are safe for concurrent use.
type Dict struct {
	ID      uint32
	Created int64  // Unix nanoseconds, as in its file
	data    []byte // the zstd dictionary (RFC 8878, section 5)

	// small and large compress frames under and from DictLitMin raw
	// bytes: made on first use, once per Dict
	small, large dictEncoder
	// smallContent overrides smallDictContent (the package's tests), if
	// set before the first use
	smallContent int
	decOnce      sync.Once
	dec          *zstd.Decoder
	decErr       error

	s2Once sync.Once
	s2d    *s2.Dict // S2's form: made on first use; nil if it has none
}

// s2Window is how much of a dictionary's content its S2 form holds: the
// most an S2 dictionary may (s2.MaxDictSize).
const s2Window = s2.MaxDictSize

// s2Form returns d's S2 form, which CodecS2Dict frames are compressed
// with: the last s2Window bytes of d's zstd content, where pickHistory
// puts the best pieces, with first repeat offset 0. It is made from the
// dictionary file alone, so every build and process makes the same. It
// is nil (frames are then compressed without it) for content of fewer
// bytes than an S2 dictionary must hold.
func (d *Dict) s2Form() *s2.Dict {
	d.s2Once.Do(func() {
		info, err := zstd.InspectDictionary(d.data)
		if err != nil {
			return
		}
		c := info.Content()
		if len(c) > s2Window {
			c = c[len(c)-s2Window:]
		}
		if len(c) < s2.MinDictSize {
			return
		}
		// The serialized form: the first repeat offset (a uvarint), then
		// the content.
		d.s2d = s2.NewDict(append([]byte{0}, c...))
	})
	return d.s2d
}

// TrainDict builds dictionary id from samples (recent payloads): its
// content, which frames refer to, is up to size bytes of them chosen by
// pickHistory; up to trainContents bytes of them, spread evenly, seed the
// entropy tables. A sample longer than MaxTrainSample is used as pieces of
// that size (zstd.BuildDict encodes each as one block). Any samples are
// safe: what cannot be trained from is an error, never a panic.
func TrainDict(id uint32, created int64, samples [][]byte, size int) (d *Dict, err error) {
	if id == 0 {
		return nil, errors.New("segment: dictionary ID 0")
	}
	samples = cutSamples(samples, MaxTrainSample)
	history := pickHistory(samples, size)
	if len(history) < 8 {
		return nil, fmt.Errorf("segment: training dictionary %08x: %d bytes of samples", id, len(history))
	}
	contents := spread(samples, trainContents)
	if len(contents) == 0 {
		return nil, fmt.Errorf("segment: training dictionary %08x: no samples", id)
	}
	data, err := buildDict(zstd.BuildDictOptions{
		ID: id, History: history, Contents: contents,
		Offsets: [3]int{1, 4, 8}, // zstd's initial repeat offsets
		Level:   zstd.SpeedFastest,
	})
	if err != nil {
		return nil, fmt.Errorf("segment: training dictionary %08x: %w", id, err)
	}
	// (BuildDict's buffer is several times the dictionary.)
	return &Dict{ID: id, Created: created, data: bytes.Clone(data)}, nil
}

// MaxTrainSample is the longest sample TrainDict gives zstd.BuildDict;
// longer ones are cut. A dictionary serves small frames, so the pieces of
// a large payload are as good a sample as the whole; BuildDict itself
// panicked on a content sample of a few hundred KiB (klauspost/compress
// v1.20.4: slice bounds out of range in its block encoder).
const MaxTrainSample = 16 << 10

// cutSamples returns samples with each one longer than n cut into pieces
// of at most n bytes (the same slices when none is).
func cutSamples(samples [][]byte, n int) [][]byte {
	if !slices.ContainsFunc(samples, func(s []byte) bool { return len(s) > n }) {
		return samples
	}
	var out [][]byte
	for _, s := range samples {
		for len(s) > n {
			out = append(out, s[:n])
			s = s[n:]
		}
		if len(s) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// buildDict is zstd.BuildDict with a panic of the library turned into an
// error: training runs on the engine's background goroutine over whatever
// the host appended, and no input may take the host's process down.
func buildDict(o zstd.BuildDictOptions) (data []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			data, err = nil, fmt.Errorf("zstd.BuildDict panicked (%d history bytes, %d samples): %v", len(o.History), len(o.Contents), r)
		}
	}()
	return zstd.BuildDict(o)
}

// trainContents bounds the samples whose statistics seed a dictionary's
// entropy tables (zstd.BuildDict compresses each): on real session logs
// 128 KiB of 480 made the frames 0.182 of their raw size instead of 0.181.
const trainContents = 128 << 10

// spread returns about n bytes of samples, taken evenly (all if they are
// fewer), at least one if there are any.
func spread(samples [][]byte, n int) [][]byte {
	total := 0
	for _, s := range samples {
		total += len(s)
	}
	if total <= n {
		return samples
	}
	var out [][]byte
	acc := total - n // (the first sample is taken: never none)
	for _, s := range samples {
		if acc += n; acc >= total {
			acc -= total
			out = append(out, s)
		}
	}
	return out
}

// pickHistory chooses up to size bytes of samples as a dictionary's
// content, in the spirit of zstd's COVER: it cuts the samples into pieces
// of pickPiece bytes and takes, greedily, the piece whose 6-byte strings
// (every other one) occur in the most samples and are not in a piece
// taken before; the best goes last (nearest the data, at the smallest
// offsets). Counts are kept in a fixed table of hashed strings
// (collisions only blur the scores). The greedy choice is lazy with
// slack: a piece whose score, looked at again, fell by less than a
// quarter is taken without looking at the others again (on real session
// logs as good a choice, in a fifth of the time; on 512 KiB of synthetic
// events the exact choice took ~250 ms).
func pickHistory(samples [][]byte, size int) []byte {
	const (
		k      = 6
		bits   = 18
		step   = 2
		minLen = 8 // load64 reads 8 bytes
	)
	hash := func(b []byte, i int) uint32 {
		v := binary.LittleEndian.Uint64(b[i:]) << (64 - 8*k)
		return uint32((v * 0x9E3779B97F4A7C15) >> (64 - bits))
	}
	count := make([]uint16, 1<<bits) // samples holding the string
	last := make([]int32, 1<<bits)   // the last sample counted, + 1
	total := 0
	for n, s := range samples {
		total += len(s)
		for i := 0; i+minLen <= len(s); i += step {
			h := hash(s, i)
			if last[h] != int32(n+1) {
				last[h] = int32(n + 1)
				if count[h] < math.MaxUint16 {
					count[h]++
				}
			}
		}
	}
	if total <= size {
		var all []byte
		for _, s := range samples {
			all = append(all, s...)
		}
		return all
	}
	covered := make([]uint64, (1<<bits)/64)
	score := func(p []byte) int {
		n := 0
		for i := 0; i+minLen <= len(p); i += step {
			if h := hash(p, i); covered[h/64]&(1<<(h%64)) == 0 {
				n += int(count[h]) - 1
			}
		}
		return n
	}
	var q pieceQueue
	for _, s := range samples {
		for i := 0; i < len(s); i += pickPiece {
			p := s[i:min(i+pickPiece+minLen-1, len(s))] // overlapping by the strings that start in it
			q = append(q, piece{p, score(p)})
		}
	}
	heap.Init(&q)
	var picked [][]byte
	for n := 0; q.Len() > 0 && n < size; {
		top := heap.Pop(&q).(piece)
		s := score(top.b)
		if s < top.score*3/4 {
			top.score = s // much lower now: put back in its place
			heap.Push(&q, top)
			continue
		}
		top.score = s
		if top.score <= 0 {
			break
		}
		picked = append(picked, top.b)
		n += len(top.b)
		for i := 0; i+minLen <= len(top.b); i++ {
			h := hash(top.b, i)
			covered[h/64] |= 1 << (h % 64)
		}
	}
	var out []byte
	for i := len(picked) - 1; i >= 0; i-- {
		out = append(out, picked[i]...)
	}
	return out[max(len(out)-size, 0):]
}

// pickPiece is the size of the pieces pickHistory chooses from.
const pickPiece = 512

type piece struct {
	b     []byte
	score int
}

// pieceQueue is a max-heap of pieces by score.
type pieceQueue []piece

func (q pieceQueue) Len() int           { return len(q) }
func (q pieceQueue) Less(i, j int) bool { return q[i].score > q[j].score }
func (q pieceQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *pieceQueue) Push(x any)        { *q = append(*q, x.(piece)) }
func (q *pieceQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// Clone returns a copy of d without its encoders and decoder.
func (d *Dict) Clone() *Dict { return &Dict{ID: d.ID, Created: d.Created, data: d.data} }

// DictFileSize is the bytes of d's file.
func DictFileSize(d *Dict) int { return dictHeaderSize + len(d.data) }

// StoredLen returns the bytes an events frame's payload raw would be
// stored as with dictionary d (nil: without one), by the engine's
// default encoder (a frame under DefaultMinCompress raw bytes is stored
// as it is without a dictionary).
func StoredLen(d *Dict, raw []byte) int {
	e := Encoder{Dict: d}.encode(KindEvents, CodecZstd, "", raw, 0, 1)
	n := len(e.stored)
	e.Release()
	return n
}

// Len is the size of the zstd dictionary.
func (d *Dict) Len() int { return len(d.data) }

// dictEncoder is a zstd encoder with a dictionary, made on first use.
type dictEncoder struct {
	once sync.Once
	enc  *zstd.Encoder
	err  error
}

// DictLitMin is the raw size from which a frame compressed with a
// dictionary also has its literals Huffman-coded. Under it they are
// stored as they are: measured on real session logs' frames of 64 B to
// 2 KiB, Huffman coding cost 13.8 instead of 8.6 µs a frame for 3% more
// bytes (0.254 instead of 0.262 of the raw); on frames of 16 KiB and
// more it saves a tenth of their bytes (0.142 against 0.158) and costs
// no more time than it saves in matching.
const DictLitMin = 2 << 10

// windowSize is the zstd window of frames compressed with d: the smallest
// power of two that holds d and 64 KiB (a frame's matches into d reach
// back from its first 64 KiB; frames are ~32 KiB), at least 256 KiB. It
// bounds the encoder's history buffer, which zstd's default window
// (8 MiB) would make 5 MiB per encoder.
func (d *Dict) windowSize() int {
	w := 256 << 10
	for w < len(d.data)+64<<10 {
		w *= 2
	}
	return w
}

// smallDictContent is how much of its dictionary's content a frame under
// DictLitMin raw bytes is compressed with: the last bytes, where
// pickHistory puts the best pieces. The encoder copies the content it
// has into its history at every frame, so a small frame's cost grows
// with it (a 300-byte frame: BenchmarkEncodeDict); a frame that refers
// only to the last bytes of the content decodes with the whole
// dictionary (its matches reach less far back), so the dictionary, its
// ID and its file are the same for both.
const smallDictContent = 32 << 10

// smallData returns d with its content cut to its last smallDictContent
// bytes, or as many as its initial repeat offsets reach back: the same
// ID, entropy tables and offsets (which the decoder starts from too).
func (d *Dict) smallData() []byte {
	info, err := zstd.InspectDictionary(d.data)
	if err != nil {
		return d.data // (the encoder reports it)
	}
	keep := smallDictContent
	if d.smallContent != 0 {
		keep = d.smallContent
	}
	for _, off := range info.Offsets() {
		keep = max(keep, off)
	}
	cs := info.ContentSize()
	if cs <= keep {
		return d.data
	}
	tables := len(d.data) - cs
	out := make([]byte, 0, tables+keep)
	out = append(out, d.data[:tables]...)
	return append(out, d.data[len(d.data)-keep:]...)
}

func (d *Dict) encoder(n int) (*zstd.Encoder, error) {
	e, large := &d.small, n >= DictLitMin
	if large {
		e = &d.large
	}
	e.once.Do(func() {
		// An encoder state is ~1 MiB (its tables and history): one
		// for small frames, which the engine compresses with a
		// dictionary within a CPU budget of a tenth of a core (two
		// at once are rare); one per core for large ones (a batch of
		// several frames is compressed on every core).
		conc := 1
		if large {
			conc = runtime.GOMAXPROCS(0)
		}
		data := d.data
		if !large {
			data = d.smallData()
		}
		e.enc, e.err = zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedFastest),
			zstd.WithEncoderCRC(false), // the frame checksum covers the payload
			zstd.WithEncoderConcurrency(conc),
			zstd.WithLowerEncoderMem(true),
			zstd.WithWindowSize(d.windowSize()),
			zstd.WithNoEntropyCompression(!large),
			zstd.WithEncoderDict(data),
		)
	})
	return e.enc, e.err
}

func (d *Dict) decoder() (*zstd.Decoder, error) {
	d.decOnce.Do(func() {
		d.dec, d.decErr = zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithDecodeAllCapLimit(true), // see decoder()
			zstd.WithDecoderMaxMemory(DefaultMaxFrameRaw),
			zstd.WithDecoderDicts(d.data),
		)
	})
	return d.dec, d.decErr
}

// compress appends d's ID and the zstd encoding of src with d to dst: a
// CodecZstdDict payload.
func (d *Dict) compress(dst, src []byte) ([]byte, error) {
	enc, err := d.encoder(len(src))
	if err != nil {
		return nil, err
	}
	dst = binary.LittleEndian.AppendUint32(dst, d.ID)
	return enc.EncodeAll(src, dst), nil
}

// decompress decodes the zstd frame src, made with d, which must decode to
// exactly rawLen bytes.
func (d *Dict) decompress(src []byte, rawLen int) ([]byte, error) {
	dec, err := d.decoder()
	if err != nil {
		return nil, err
	}
	out, err := dec.DecodeAll(src, make([]byte, 0, rawLen+decodeSlack))
	if err != nil {
		return nil, err
	}
	if len(out) != rawLen {
		return nil, fmt.Errorf("decoded %d bytes, header says %d", len(out), rawLen)
	}
	return out, nil
}

// marshal returns d as a dictionary file.
func (d *Dict) marshal() []byte {
	b := make([]byte, dictHeaderSize, dictHeaderSize+len(d.data))
	copy(b, dictMagic[:])
	binary.LittleEndian.PutUint16(b[8:], DictFileVersion)
	binary.LittleEndian.PutUint16(b[10:], dictHeaderSize)
	binary.LittleEndian.PutUint32(b[12:], d.ID)
	binary.LittleEndian.PutUint64(b[16:], uint64(len(d.data)))
	binary.LittleEndian.PutUint64(b[24:], uint64(d.Created))
	b = append(b, d.data...)
	binary.LittleEndian.PutUint64(b[32:], dictSum(b))
	return b
}

func dictSum(file []byte) uint64 {
	h := xxhash.New()
	_, _ = h.Write(file[:32])
	_, _ = h.Write(file[dictHeaderSize:])
	return h.Sum64()
}

// ParseDict validates the dictionary file b, found at path (whose name
// gives the ID it must hold). A file of another format version is a
// *FormatError; any other defect a *CorruptionError at path.
func ParseDict(path string, b []byte) (*Dict, error) {
	bad := func(off int64, reason string) (*Dict, error) {
		return nil, &CorruptionError{Path: path, Offset: off, Reason: "dictionary file: " + reason}
	}
	want, ok := ParseDictName(filepath.Base(path))
	switch {
	case !ok:
		return bad(0, "not a dictionary file name")
	case len(b) < 10 || [8]byte(b[:8]) != dictMagic:
		return bad(0, "bad magic")
	}
	if v := int(binary.LittleEndian.Uint16(b[8:])); v != DictFileVersion {
		return nil, &FormatError{Path: path, What: "dictionary", Version: v, Supported: DictFileVersion, Oldest: DictFileVersion}
	}
	if len(b) < dictHeaderSize {
		return bad(0, fmt.Sprintf("file of %d bytes is shorter than its header", len(b)))
	}
	id := binary.LittleEndian.Uint32(b[12:])
	n := binary.LittleEndian.Uint64(b[16:])
	switch {
	case binary.LittleEndian.Uint16(b[10:]) != dictHeaderSize:
		return bad(0, "bad header length")
	case n != uint64(len(b)-dictHeaderSize) || n > MaxDictLen:
		return bad(0, fmt.Sprintf("header says %d dictionary bytes, the file holds %d", n, len(b)-dictHeaderSize))
	case binary.LittleEndian.Uint64(b[32:]) != dictSum(b):
		return bad(0, "checksum mismatch")
	case id != want:
		return bad(0, fmt.Sprintf("holds dictionary %08x", id))
	}
	data := b[dictHeaderSize:]
	zd, err := zstd.InspectDictionary(data)
	if err != nil {
		return bad(dictHeaderSize, "not a zstd dictionary: "+err.Error())
	}
	if zd.ID() != id {
		return bad(dictHeaderSize, fmt.Sprintf("zstd dictionary %08x in the file of dictionary %08x", zd.ID(), id))
	}
	return &Dict{ID: id, Created: int64(binary.LittleEndian.Uint64(b[24:])), data: data}, nil
}

// ReadDict reads and validates the dictionary file at path (see ParseDict).
func ReadDict(fsys vfs.FS, path string) (*Dict, error) {
	b, err := vfs.ReadFile(orDefault(fsys), path)
	if err != nil {
		return nil, err
	}
	return ParseDict(path, b)
}

// WriteDict stores d in dir durably, before any frame may name it: the file
// is built as DictName(d.ID)+".tmp", synced, renamed into place and the
// directory synced. It fails with fs.ErrExist if dictionary d.ID exists
// (a dictionary never changes). The caller must keep other writers of the
// same ID out (the engine allocates IDs under a lock). An fsync failure
// wraps ErrSyncFailed: the file may or may not be there, durable or not.
func WriteDict(fsys vfs.FS, dir string, d *Dict) error {
	fsys = orDefault(fsys)
	path := filepath.Join(dir, DictName(d.ID))
	tmp := path + dictTempSuffix
	if f, err := fsys.Open(path); err == nil {
		f.Close()
		return fmt.Errorf("segment: write dictionary %s: %w", path, fs.ErrExist)
	}
	if err := fsys.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		f.Close()
		if rerr := fsys.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("segment: write dictionary %s: %w", path, err)
	}
	if _, err := f.WriteAt(d.marshal(), 0); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrSyncFailed, err))
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("segment: write dictionary %s: %w: %w", path, ErrSyncFailed, err)
	}
	return nil
}

// SyncDict makes dictionary id, which another process wrote into dir,
// durable before this one names it in a frame: that process may have
// died, or failed its fsync, between the rename (WriteDict) and the
// directory's fsync, leaving a file a power cut may take away. It
// fsyncs the file and the directory; a failure wraps ErrSyncFailed.
func SyncDict(fsys vfs.FS, dir string, id uint32) error {
	fsys = orDefault(fsys)
	path := filepath.Join(dir, DictName(id))
	f, err := fsys.Open(path)
	if err != nil {
		return fmt.Errorf("segment: sync dictionary %s: %w", path, err)
	}
	err = f.Sync()
	f.Close()
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("segment: sync dictionary %s: %w: %w", path, ErrSyncFailed, err)
	}
	return nil
}

// ListDicts returns the IDs of the dictionary files in dir, in increasing
// order. Other files are ignored.
func ListDicts(fsys vfs.FS, dir string) ([]uint32, error) {
	return listIDs(fsys, dir, ParseDictName) // (the fixed-width hex IDs sort like their names)
}

// NewestDict returns the ID of the dictionary made last in dir (by the
// creation times in the files' headers), 0 if there is none. A header it
// cannot read is a *CorruptionError at that file.
func NewestDict(fsys vfs.FS, dir string) (uint32, error) {
	fsys = orDefault(fsys)
	ids, err := ListDicts(fsys, dir)
	if err != nil {
		return 0, err
	}
	var newest uint32
	var at int64
	for _, id := range ids {
		path := filepath.Join(dir, DictName(id))
		f, err := fsys.Open(path)
		if err != nil {
			return 0, err
		}
		var b [dictHeaderSize]byte
		_, err = f.ReadAt(b[:], 0)
		f.Close()
		switch {
		case errors.Is(err, io.EOF) || err == nil && ([8]byte(b[:8]) != dictMagic || binary.LittleEndian.Uint32(b[12:]) != id):
			return 0, &CorruptionError{Path: path, Reason: "dictionary file: bad header"}
		case err != nil:
			return 0, err
		}
		if c := int64(binary.LittleEndian.Uint64(b[24:])); newest == 0 || c > at || c == at && id > newest {
			newest, at = id, c
		}
	}
	return newest, nil
}

// Dicts finds the dictionaries that frames name, by ID, in the directory
// of a store: each is read and checked once, on first use. It is safe for
// concurrent use; readers of one store share one.
type Dicts struct {
	fsys vfs.FS
	dir  string
	mu   sync.Mutex
	m    map[uint32]*Dict
}

// NewDicts returns the dictionaries of the store in dir.
func NewDicts(fsys vfs.FS, dir string) *Dicts {
	return &Dicts{fsys: orDefault(fsys), dir: dir, m: map[uint32]*Dict{}}
}

// Path returns the file of dictionary id.
func (s *Dicts) Path(id uint32) string { return filepath.Join(s.dir, DictName(id)) }

// Get returns dictionary id, reading its file if it was not read yet. A
// missing file is a *CorruptionError naming it (a frame names only a
// dictionary made durable before it), wrapping fs.ErrNotExist; so is a
// damaged one (see ParseDict). Failures are not remembered: the next Get
// reads the file again.
func (s *Dicts) Get(id uint32) (*Dict, error) {
	s.mu.Lock()
	d := s.m[id]
	s.mu.Unlock()
	if d != nil {
		return d, nil
	}
	path := s.Path(id)
	d, err := ReadDict(s.fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &CorruptionError{Path: path, Reason: fmt.Sprintf("dictionary %08x is missing", id), Err: err}
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.m[id]; old != nil {
		return old, nil
	}
	s.m[id] = d
	return d, nil
}

// Add makes d known without reading its file (its maker wrote it).
func (s *Dicts) Add(d *Dict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[d.ID] == nil {
		s.m[d.ID] = d.Clone()
	}
}
