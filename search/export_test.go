package search

// SetBatchEvents sets the events of a catch-up's transactions (tests).
func SetBatchEvents(n int) { batchEvents = n }
