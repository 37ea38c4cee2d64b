// Package framecheck is Check's scan of every frame (docs/DESIGN.md,
// Tools): it reads each segment of a store from its start, decodes every
// frame (with the dictionary it names), reports each damaged frame at its
// segment and offset and resumes at the next valid frame after it, and
// reads every dictionary file; a dictionary that cannot be read is one
// problem at its file, with the number of frames that name it, not one
// per frame.
//
// It knows segments, dictionaries and the error types of internal/base,
// nothing of sessions, the index, the coordination or the DB: what the
// engine knows of the store (the segments its recovery sets aside, what
// the index proves durable, the durable end another process published)
// it passes in [Options]. It does no I/O but reads, takes no lock and
// starts no goroutine. The engine's Check runs it (engine/check.go).
package framecheck
