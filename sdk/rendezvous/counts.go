package rendezvous

import "sync"

// reqCounts counts a server's requests by method and its error answers by
// status code (ServerStats.ByMethod, Refused: the job's metrics).
type reqCounts struct {
	mu      sync.Mutex
	method  map[string]int64
	refused map[int]int64
}

func (c *reqCounts) request(method string) {
	c.mu.Lock()
	if c.method == nil {
		c.method = map[string]int64{}
	}
	c.method[method]++
	c.mu.Unlock()
}

func (c *reqCounts) refuse(code int) {
	c.mu.Lock()
	if c.refused == nil {
		c.refused = map[int]int64{}
	}
	c.refused[code]++
	c.mu.Unlock()
}

func (c *reqCounts) snapshot() (map[string]int64, map[int]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, r := make(map[string]int64, len(c.method)), make(map[int]int64, len(c.refused))
	for k, v := range c.method {
		m[k] = v
	}
	for k, v := range c.refused {
		r[k] = v
	}
	return m, r
}
