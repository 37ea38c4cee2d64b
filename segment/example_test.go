package segment_test

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
)

func Example() {
	dir, _ := os.MkdirTemp("", "seglog-example-")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "0000000000000001.seg")

	// A new segment: its header, synced and renamed into place.
	if err := segment.Create(nil, path, 1, segment.CreateOptions{}); err != nil {
		log.Fatal(err)
	}
	evs := []event.Event{
		{Seq: 0, Type: "turn/start", Time: 1000, Data: json.RawMessage(`{"turn":0}`)},
		{Seq: 1, Type: "user/message", Time: 1001, Data: json.RawMessage(`{"text":"hi"}`), SurfaceOp: json.RawMessage(`"append"`)},
	}
	// One frame, written after the header as the engine's writer does
	// (engine/internal/wal): its base is the offset of the write it is
	// part of, and the fdatasync makes it durable.
	e, err := segment.Encoder{}.Events("session-1", 0, evs)
	if err != nil {
		log.Fatal(err)
	}
	off := int64(segment.HeaderSize)
	f0, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := f0.WriteAt(e.AppendFrame(nil, off), off); err != nil {
		log.Fatal(err)
	}
	if err := f0.Sync(); err != nil {
		log.Fatal(err)
	}
	f0.Close()

	r, err := segment.OpenReader(nil, path)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	f, err := r.ReadFrame(off)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range f.Events {
		fmt.Println(f.Session, e.Seq, e.Type, string(e.Data))
	}
	// Output:
	// session-1 0 turn/start {"turn":0}
	// session-1 1 user/message {"text":"hi"}
}
