package rendezvous

// Set stores value under key in scope, exactly as an authenticated
// PUT /<scope>/<key> would (requests held by ?wait_ms on the key are answered).
// It is for the process that owns the server: hvdrun's elastic driver writes
// the "elastic" scope (docs/elastic.md) with it, without a round trip through
// its own HTTP listener. Safe for concurrent use.
func (s *Server) Set(scope, key string, value []byte) {
	if value == nil {
		value = []byte{}
	}
	s.put(scope, key, append([]byte(nil), value...))
}

// AddPlan declares more plan scopes (see Init) without forgetting any key:
// the elastic driver names the scopes of world epoch N with EpochScope and
// adds them when it publishes that world, while the keys of the running
// world and of the "elastic" scope stay. A scope already planned gets the
// new size and loses its finished marks.
func (s *Server) AddPlan(plan map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range plan {
		s.plan[k] = v
		delete(s.finished, k)
	}
}

// Prefixed returns a copy of every key of scope that starts with prefix,
// with its value (nil when there is none). hvdrun's elastic driver reads the
// workers' failure reports (elastic/failed.<N>.<reporter>, docs/elastic.md)
// with it, without a round trip through its own HTTP listener. Safe for
// concurrent use.
func (s *Server) Prefixed(scope, prefix string) map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out map[string][]byte
	for k, v := range s.data[scope] {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			if out == nil {
				out = map[string][]byte{}
			}
			out[k] = append([]byte(nil), v...)
		}
	}
	return out
}
