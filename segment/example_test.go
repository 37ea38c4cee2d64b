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

	w, err := segment.Create(nil, path, 1, segment.WriterOptions{Preallocate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	evs := []event.Event{
		{Seq: 0, Type: "turn/start", Time: 1000, Data: json.RawMessage(`{"turn":0}`)},
		{Seq: 1, Type: "user/message", Time: 1001, Data: json.RawMessage(`{"text":"hi"}`), SurfaceOp: json.RawMessage(`"append"`)},
	}
	loc, err := w.Append("session-1", 0, evs)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Sync(); err != nil { // durable from here
		log.Fatal(err)
	}

	r, err := segment.OpenReader(nil, path)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	f, err := r.ReadFrame(loc.Offset)
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
