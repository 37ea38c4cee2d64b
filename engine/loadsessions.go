package engine

import "github.com/seglog/seglog/index"

// sessionLoader makes the sessions of an index's records as the index's
// check at Open meets them (index.Options.Sessions), so that an open of a
// store of a million sessions takes well under a second: the records'
// IDs and header bytes are copied in bulk into shared blocks (a block
// stays while a session of it does), and a goroutine of the loader's own
// makes the sessions of each batch while the check goes on. The map is
// made at its size once the number is known; the sessions, which come in
// ID order, seed the orders ListPage keeps (listorder.IDs.Seed,
// updatedOrder.seed).
type sessionLoader struct {
	cur   *loadBatch
	hdrs  []byte
	work  chan *loadBatch
	done  chan struct{}
	made  []*session // the goroutine's, until done
	ended bool
}

// loadBatch is a batch of records for the goroutine.
type loadBatch struct {
	recs []index.Session // ID "", Header in a block of the loader's
	ids  []byte          // the IDs, one after the other
	ends []int           // where each ends in ids
}

const (
	loadBatchLen = 1024
	hdrBlock     = 64 << 10
)

func newSessionLoader() *sessionLoader {
	l := &sessionLoader{work: make(chan *loadBatch, 4), done: make(chan struct{})}
	go l.run()
	return l
}

// add takes one record (index.Options.Sessions).
func (l *sessionLoader) add(id []byte, s index.Session, hdr []byte) {
	if len(l.hdrs)+len(hdr) > cap(l.hdrs) {
		l.hdrs = make([]byte, 0, max(hdrBlock, len(hdr)))
	}
	at := len(l.hdrs)
	l.hdrs = append(l.hdrs, hdr...)
	s.Header = l.hdrs[at:len(l.hdrs):len(l.hdrs)]
	if l.cur == nil {
		l.cur = &loadBatch{recs: make([]index.Session, 0, loadBatchLen), ends: make([]int, 0, loadBatchLen)}
	}
	b := l.cur
	b.recs = append(b.recs, s)
	b.ids = append(b.ids, id...)
	b.ends = append(b.ends, len(b.ids))
	if len(b.recs) == loadBatchLen {
		l.work <- b
		l.cur = nil
	}
}

// run makes the sessions of each batch.
func (l *sessionLoader) run() {
	defer close(l.done)
	for b := range l.work {
		all := string(b.ids) // (one string the batch's IDs share)
		start := 0
		for i := range b.recs {
			is := &b.recs[i]
			l.made = append(l.made, &session{
				id: all[start:b.ends[i]], hdrRaw: is.Header, inherited: is.Inherited, uid: is.UID,
				next: is.Events, framed: is.Events, size: is.Size, idxNext: is.Events, idxSize: is.Size,
				title: is.Title, updatedAt: is.UpdatedAt, metaAt: is.MetaEvents,
				checked: is.Checked, checkedCat: is.Catalog,
				turnFrom: is.TurnFrom, idxTurnFrom: is.TurnFrom,
			})
			start = b.ends[i]
		}
	}
}

// finish waits for the goroutine and returns the sessions by ID and in
// ID order. Once called, the loader takes no more records (and a second
// call returns nothing: an open that does not use them calls it only to
// end the goroutine).
func (l *sessionLoader) finish() (map[string]*session, []*session) {
	if l.ended {
		return nil, nil
	}
	l.ended = true
	if l.cur != nil {
		l.work <- l.cur
		l.cur = nil
	}
	close(l.work)
	<-l.done
	sessions := make(map[string]*session, len(l.made))
	for _, s := range l.made {
		sessions[s.id] = s
	}
	made := l.made
	l.made = nil
	return sessions, made
}
