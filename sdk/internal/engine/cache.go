package engine

import "slices"

// Cache is the response cache (HOROVOD_CACHE_CAPACITY): negotiated
// single-tensor responses by name, so steady-state iterations skip the
// coordinator. Every member holds an identical cache — entries are added,
// used and erased only in steps every member takes in the same order — so a
// cache position (a bit) means the same tensor on every rank, and one small
// exchange of bit vectors finds the tensors every rank has ready.
//
// Only allreduce, allgather and alltoall responses without joined ranks are
// cached (as Horovod). Pure; used by the engine's goroutine only.
type Cache struct {
	capacity int
	entries  []cacheEntry // position = bit
	tick     uint64
	// index: name → position, rebuilt after entries move (Put, Erase);
	// Lookup runs for every request of every round, Put and Erase only
	// after negotiations.
	index map[string]int
	stale bool
}

type cacheEntry struct {
	req  Request  // this rank's request when it was negotiated
	resp Response // single-name response
	used uint64
}

// CacheState is the result of a lookup.
type CacheState int

const (
	Miss    CacheState = iota
	Hit                // same name, same parameters
	Invalid            // same name, different parameters: must be renegotiated
)

// NewCache returns a cache of the given capacity (0 disables it).
func NewCache(capacity int) *Cache { return &Cache{capacity: capacity} }

// Words is the size of a bit vector in 64-bit words.
func (c *Cache) Words() int { return (c.capacity + 63) / 64 }

// Cacheable reports whether requests of this type use the cache.
func Cacheable(t OpType) bool { return t == Allreduce || t == Allgather || t == Alltoall }

// Lookup finds q's name and compares the parameters.
func (c *Cache) Lookup(q *Request) (bit int, st CacheState) {
	if c.stale || c.index == nil {
		c.index = make(map[string]int, len(c.entries))
		for i := range c.entries {
			c.index[c.entries[i].req.Name] = i
		}
		c.stale = false
	}
	i, ok := c.index[q.Name]
	if !ok {
		return -1, Miss
	}
	if sameParams(&c.entries[i].req, q) {
		return i, Hit
	}
	return i, Invalid
}

func sameParams(a, b *Request) bool {
	return a.Type == b.Type && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && a.ReduceOp == b.ReduceOp &&
		a.Prescale == b.Prescale && a.Postscale == b.Postscale && a.Root == b.Root && a.Group == b.Group &&
		a.Priority == b.Priority
}

// Response returns the cached response at bit and marks it used.
func (c *Cache) Response(bit int) Response {
	c.tick++
	c.entries[bit].used = c.tick
	return c.entries[bit].resp
}

// Name returns the tensor name cached at bit.
func (c *Cache) Name(bit int) string { return c.entries[bit].req.Name }

// Put adds a negotiated response (single name) with this rank's request,
// evicting the least recently used entry when full.
func (c *Cache) Put(q Request, r Response) {
	if c.capacity <= 0 {
		return
	}
	if bit, st := c.Lookup(&q); st != Miss {
		c.entries = slices.Delete(c.entries, bit, bit+1)
	}
	if len(c.entries) >= c.capacity {
		lru := 0
		for i := range c.entries {
			if c.entries[i].used < c.entries[lru].used {
				lru = i
			}
		}
		c.entries = slices.Delete(c.entries, lru, lru+1)
	}
	c.tick++
	c.entries = append(c.entries, cacheEntry{req: q, resp: r, used: c.tick})
	c.stale = true
}

// Erase removes the entries whose bits are set in bits.
func (c *Cache) Erase(bits []uint64) {
	keep := c.entries[:0]
	for i, e := range c.entries {
		if bits[i/64]&(1<<(i%64)) == 0 {
			keep = append(keep, e)
		}
	}
	if len(keep) != len(c.entries) {
		c.stale = true
	}
	c.entries = keep
}

// Len is the number of cached responses.
func (c *Cache) Len() int { return len(c.entries) }
