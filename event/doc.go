// Package event defines the session event row that every seglog layer speaks:
// [Event] mirrors one line of the reference harness's JSONL log (type, seq,
// time, data, ignorable, sourceEventSeqs, surfaceOp), so a reference log
// converts to it and back without loss; [Catalog] is the set of event
// types a store interprets (docs/EVENTS.md).
//
// event is a leaf package: it imports nothing from seglog and does no I/O.
// The storage layers (segment, engine), the pure layers (recovery, plan) and
// hosts all use the same type; engine re-exports it as event.Event.
package event
