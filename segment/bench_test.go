package segment

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// batchOf returns events of about size bytes each, totalling about total.
func batchOf(size, total int) []event.Event {
	return makeEvents(0, max(total/size, 1), size)
}

func BenchmarkEncode(b *testing.B) {
	for _, bc := range []struct {
		name        string
		size, total int
	}{
		{"batch=300B", 300, 300},
		{"batch=64KiB", 300, 64 << 10},
	} {
		for _, codec := range []Codec{CodecNone, CodecZstd} {
			b.Run(fmt.Sprintf("%s/codec=%s", bc.name, codec), func(b *testing.B) {
				evs := batchOf(bc.size, bc.total)
				raw := appendEvents(nil, evs)
				b.SetBytes(int64(testgen.Size(evs)))
				b.ReportAllocs()
				buf := make([]byte, 0, 2*len(raw)+1024)
				key := []byte("session-0123456789")
				var stored int
				for b.Loop() {
					r := appendEvents(buf[:0], evs)
					s := r
					if codec == CodecZstd {
						s = compress(nil, r)
					}
					frame := make([]byte, frameSize(len(key), len(s)))
					putFrame(frame, KindEvents, codec, key, s, len(r), 0, uint32(len(evs)), HeaderSize)
					stored = len(frame)
				}
				b.ReportMetric(float64(stored)/float64(len(evs)), "disk-B/event")
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, bc := range []struct {
		name        string
		size, total int
	}{
		{"batch=300B", 300, 300},
		{"batch=64KiB", 300, 64 << 10},
	} {
		for _, codec := range []Codec{CodecNone, CodecZstd} {
			b.Run(fmt.Sprintf("%s/codec=%s", bc.name, codec), func(b *testing.B) {
				evs := batchOf(bc.size, bc.total)
				raw := appendEvents(nil, evs)
				s := raw
				if codec == CodecZstd {
					s = compress(nil, raw)
				}
				key := []byte("session-0123456789")
				data := make([]byte, HeaderSize+frameSize(len(key), len(s)))
				copy(data, appendHeader(nil, Header{Version: Version, ID: 1}))
				putFrame(data[HeaderSize:], KindEvents, codec, key, s, len(raw), 0, uint32(len(evs)), HeaderSize)
				b.SetBytes(int64(testgen.Size(evs)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := DecodeFrame("b", data, HeaderSize, 0, nil); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkDurableAppend measures one 300-byte event appended and synced
// (encoded, written as a frame and fdatasynced by the test writer, the
// engine writer's discipline without its locks), against the physical
// limit measured in the same run: a raw write + fdatasync of the same
// frame bytes, appending to a file or overwriting a preallocated one. It
// reports p50/p99 latency.
func BenchmarkDurableAppend(b *testing.B) {
	evs := makeEvents(0, 1, 300)
	frameLen := int(frameSize(len("session-1"), len(appendEvents(nil, evs))))
	const fileSize = 64 << 20
	b.Run("mode=raw-append", func(b *testing.B) {
		f := createRaw(b, false, fileSize)
		buf := make([]byte, frameLen)
		off := int64(HeaderSize)
		lat := latencies(b, func() {
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			off += int64(frameLen)
		})
		report(b, lat)
	})
	b.Run("mode=raw-overwrite", func(b *testing.B) {
		f := createRaw(b, true, fileSize)
		buf := make([]byte, frameLen)
		off := int64(HeaderSize)
		lat := latencies(b, func() {
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			off = (off + int64(frameLen)) % (fileSize - int64(frameLen))
		})
		report(b, lat)
	})
	for _, prealloc := range []bool{false, true} {
		b.Run(fmt.Sprintf("mode=segment/prealloc=%v", prealloc), func(b *testing.B) {
			dir := b.TempDir()
			n := 0
			var w *testWriter
			roll := func() {
				if w != nil {
					w.Close()
				}
				var err error
				w, err = newTestWriter(vfs.Default, filepath.Join(dir, fmt.Sprintf("%d.seg", n)), uint64(n), writerOpts{Size: fileSize, Preallocate: prealloc})
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			roll()
			defer func() { w.Close() }()
			seq := uint64(0)
			lat := latencies(b, func() {
				evs[0].Seq = seq
				seq++
				if _, err := w.Append("session-1", evs[0].Seq, evs); err != nil {
					b.Fatal(err)
				}
				if err := w.Sync(); err != nil {
					b.Fatal(err)
				}
				if w.Size() > fileSize-4096 {
					b.StopTimer()
					roll()
					b.StartTimer()
				}
			})
			report(b, lat)
		})
	}
}

func createRaw(b *testing.B, prealloc bool, size int64) vfs.File {
	b.Helper()
	f, err := vfs.Default.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	if prealloc {
		if err := zeroFill(f, 0, size); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return f
}

func latencies(b *testing.B, op func()) []time.Duration {
	b.ReportAllocs()
	var lat []time.Duration
	for b.Loop() {
		t := time.Now()
		op()
		lat = append(lat, time.Since(t))
	}
	return lat
}

func report(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	if len(lat) == 0 {
		return
	}
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEncodeDict: a frame of one ~300-byte event compressed with a
// dictionary of 160 KiB of content (the most the engine trains), small
// frames using all of its content or its last smallDictContent bytes.
func BenchmarkEncodeDict(b *testing.B) {
	var samples [][]byte
	for i := range 2000 {
		samples = append(samples, appendEvents(nil, makeEvents(uint64(i), 4, 300)))
	}
	for _, content := range []int{160 << 10, 64 << 10, 32 << 10, 16 << 10} {
		b.Run(fmt.Sprintf("content=%dKiB", content>>10), func(b *testing.B) {
			d, err := TrainDict(7, 1, samples, 160<<10)
			if err != nil {
				b.Fatal(err)
			}
			d.smallContent = content
			evs := makeEvents(5000, 1, 300)
			e := Encoder{Dict: d}
			var stored int
			for b.Loop() {
				enc, err := e.Events("session-0123456789", 5000, evs)
				if err != nil {
					b.Fatal(err)
				}
				stored = len(enc.stored)
				enc.Release()
			}
			b.ReportMetric(float64(stored), "stored-B")
			if info, err := zstd.InspectDictionary(d.smallData()); err == nil {
				b.ReportMetric(float64(info.ContentSize()), "content-B")
			}
		})
	}
}
