package bufpool

import "sync"

// Pool is a pool of byte buffers. A buffer of more than Max bytes is not
// kept (nor handed out: Get makes a new one for such a size). The zero
// Pool keeps none. It is safe for concurrent use.
type Pool struct {
	Max int
	p   sync.Pool // *[]byte: the buffers
	// headers: the *[]byte that carried a buffer Get handed out, for
	// Put to carry the next one (a new one per Put was an allocation per
	// buffer kept)
	headers sync.Pool
}

// Get returns an empty buffer with room for n bytes.
func (b *Pool) Get(n int) []byte {
	if n <= b.Max {
		if v, ok := b.p.Get().(*[]byte); ok {
			if cap(*v) >= n {
				buf := (*v)[:0]
				*v = nil
				b.headers.Put(v)
				return buf
			}
			b.p.Put(v)
		}
	}
	return make([]byte, 0, n)
}

// Put keeps buf for a later Get. Nothing may use buf after.
func (b *Pool) Put(buf []byte) {
	if cap(buf) == 0 || cap(buf) > b.Max {
		return
	}
	v, ok := b.headers.Get().(*[]byte)
	if !ok {
		v = new([]byte)
	}
	*v = buf[:0]
	b.p.Put(v)
}
