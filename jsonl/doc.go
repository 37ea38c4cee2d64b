// Package jsonl reads and writes the reference harness's on-disk session
// logs (format v3; docs/CLI.md; docs/EVENTS.md): a root of
// <project>/<encodedId>/session.v3.jsonl (or .jsonl.zstd) files, a header
// line and one JSON line per event. cmd/seglog's import and export use it,
// and a host can too: to import the reference's logs itself ([Parse]
// reports what the torn-tail rule cut, in [Log.Cut]) or to write a session
// out as the reference would. It reads the older released formats too: v2
// (session.v2.jsonl, the v3 layout), and v1 (session.v1.jsonl) and v0
// (session.jsonl, the older id-addressed API's), whose header has a
// seedLength instead of isSeeded and whose packed assistant rows it
// expands (Parse).
//
// jsonl sits on the store contract (it speaks store.Header and
// event.Event) and does I/O only on the paths it is given.
package jsonl
