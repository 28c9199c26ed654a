package rendezvous

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Authentication headers. When a secret key is configured every request
// carries
//
//	X-Hvd-Timestamp: <unix nanoseconds>
//	X-Hvd-Auth:      hex(HMAC-SHA256(secret, method + "\n" + requestURI + "\n" + timestamp + "\n" + hex(SHA-256(body))))
//
// where requestURI is the escaped path plus "?" and the query, exactly as sent
// on the request line. The server rejects a missing or wrong signature, and a
// timestamp more than MaxClockSkew away from its clock, with 401. It accepts
// each signed request once (replayGuard): a captured request sent again
// while its timestamp is still within the window is refused with 401 too.
const (
	HeaderAuth      = "X-Hvd-Auth"
	HeaderTimestamp = "X-Hvd-Timestamp"
	// MaxClockSkew bounds |server clock - X-Hvd-Timestamp|.
	MaxClockSkew = 5 * time.Minute
	// headerReplayed marks a 401 for a request whose signature the store
	// accepted before: the client signs it again with a new timestamp and
	// retries (two processes may sign the same request in the same
	// nanosecond, and net/http may resend a request on a broken connection).
	headerReplayed = "X-Hvd-Replayed"
)

// stamper keeps a client's X-Hvd-Timestamps strictly increasing, so
// that no two requests of one client share a signature even on a coarse
// clock. The zero value is ready; safe for concurrent use.
type stamper struct{ last atomic.Int64 }

// next returns the timestamp for the next signed request.
func (s *stamper) next(now time.Time) int64 {
	for {
		last, ns := s.last.Load(), now.UnixNano()
		if ns <= last {
			ns = last + 1
		}
		if s.last.CompareAndSwap(last, ns) {
			return ns
		}
	}
}

// sign computes the X-Hvd-Auth value.
func sign(secret []byte, method, requestURI, timestamp string, body []byte) string {
	return signSum(secret, method, requestURI, timestamp, sha256.Sum256(body))
}

// signSum is sign with the body's SHA-256 already computed (the server
// hashes a body while reading it).
func signSum(secret []byte, method, requestURI, timestamp string, bodySum [sha256.Size]byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(method))
	m.Write([]byte{'\n'})
	m.Write([]byte(requestURI))
	m.Write([]byte{'\n'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'\n'})
	m.Write([]byte(hex.EncodeToString(bodySum[:])))
	return hex.EncodeToString(m.Sum(nil))
}

// checkAuthHeaders checks what can be checked before the body is read: the
// signature is present and has the form of an HMAC-SHA256 in hex, and the
// timestamp is within MaxClockSkew. The error text is sent to the client.
func checkAuthHeaders(timestamp, auth string, now time.Time) error {
	if auth == "" {
		return fmt.Errorf("no %s header; this store requires the job's secret key (HVD_SECRET_KEY)", HeaderAuth)
	}
	if len(auth) != 2*sha256.Size {
		return fmt.Errorf("%s is %d characters, want %d hex digits", HeaderAuth, len(auth), 2*sha256.Size)
	}
	if _, err := hex.DecodeString(auth); err != nil {
		return fmt.Errorf("%s is not hex", HeaderAuth)
	}
	ns, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %q is not a unix time in nanoseconds", HeaderTimestamp, timestamp)
	}
	skew := now.Sub(time.Unix(0, ns))
	if skew < 0 {
		skew = -skew
	}
	if skew > MaxClockSkew {
		return fmt.Errorf("%s is %v away from the store's clock (limit %v); synchronise the clocks (NTP)", HeaderTimestamp, skew.Round(time.Second), MaxClockSkew)
	}
	return nil
}

// verifySum checks the signature against the body's SHA-256, once
// checkAuthHeaders passed.
func verifySum(secret []byte, method, requestURI, timestamp, auth string, bodySum [sha256.Size]byte) error {
	got, err := hex.DecodeString(auth)
	if err != nil {
		return fmt.Errorf("%s is not hex", HeaderAuth)
	}
	want, _ := hex.DecodeString(signSum(secret, method, requestURI, timestamp, bodySum))
	if !hmac.Equal(got, want) {
		return fmt.Errorf("%s signature does not match: the client uses a different secret key (HVD_SECRET_KEY) than the store", HeaderAuth)
	}
	return nil
}

// replayGuard remembers the signature of every accepted request until its
// timestamp leaves the MaxClockSkew window, so that the same signed request
// (same method, URI, timestamp and body, hence the same X-Hvd-Auth) is
// accepted once: a replay of a captured GET or PUT is refused. The
// signature is the nonce: a client signs every request (and every retry)
// with a new nanosecond timestamp. Entries are bucketed by the time their
// timestamp leaves the window, and whole buckets are dropped, so the cost
// is one map insert per request and memory is about 40 bytes per request
// of the last MaxClockSkew (docs/security.md). The zero value is ready;
// safe for concurrent use.
type replayGuard struct {
	mu    sync.Mutex
	seen  map[int64]map[[16]byte]struct{} // by expiry / replayBucket
	swept int64                           // the bucket of the last sweep
	fresh int                             // remembered signatures (tests)
}

const replayBucket = 10 * time.Second

// first records the signature auth (hex, checked by verifySum) of a request
// with timestamp ts (checked by checkAuthHeaders) and reports whether it was
// not seen before.
func (g *replayGuard) first(ts, auth string, now time.Time) bool {
	ns, err := strconv.ParseInt(ts, 10, 64)
	raw, herr := hex.DecodeString(auth)
	if err != nil || herr != nil || len(raw) < 16 {
		return false // checked before: cannot happen
	}
	var k [16]byte
	copy(k[:], raw)
	b := (ns + int64(MaxClockSkew)) / int64(replayBucket)
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur := now.UnixNano() / int64(replayBucket); cur != g.swept {
		// A bucket below cur holds only expiries before now: those
		// timestamps are refused by checkAuthHeaders already.
		for x, m := range g.seen {
			if x < cur {
				g.fresh -= len(m)
				delete(g.seen, x)
			}
		}
		g.swept = cur
	}
	if g.seen == nil {
		g.seen = map[int64]map[[16]byte]struct{}{}
	}
	m := g.seen[b]
	if m == nil {
		m = map[[16]byte]struct{}{}
		g.seen[b] = m
	}
	if _, dup := m[k]; dup {
		return false
	}
	m[k] = struct{}{}
	g.fresh++
	return true
}
