package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// Example is the README's first host: the lines between the two README
// markers are the body of the README's func main, line for line
// (internal/lint's TestReadmeFirstHost holds them to it), so that the
// README's first screen of Go compiles and does what it says.
func Example() {
	tmp, err := os.MkdirTemp("", "seglog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	dir := tmp + "/agent-sessions"
	// README: first host begins
	ctx := context.Background()
	db, err := engine.Open(dir, nil) // nil: the defaults; any number of processes may open the store
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close() // flushes every open write handle

	h, err := db.Create(ctx, store.Header{ID: "s-1"}) // the session's single-writer handle
	if err != nil {
		log.Fatal(err)
	}
	turn := []event.Event{
		{Seq: 0, Type: "turn/start", Time: 1700000000000, Data: json.RawMessage(`{"turn":0}`)},
		{Seq: 1, Type: "step/start", Time: 1700000000001, Data: json.RawMessage(`{"turn":0,"step":0}`)},
	}
	if err := h.Append(ctx, turn...); err != nil { // durable within 200 ms plus one fdatasync
		log.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil { // the barrier: durable when it returns
		log.Fatal(err)
	}
	evs, err := h.Read(ctx, 0, -1) // the whole log
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range evs {
		fmt.Println(e.Seq, e.Type)
	}
	if err := h.Close(); err != nil { // releases the lease: another process may write s-1 now
		log.Fatal(err)
	}
	// README: first host ends

	// Output:
	// 0 turn/start
	// 1 step/start
}
