package rendezvous

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
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
// timestamp more than MaxClockSkew away from its clock, with 401. A captured
// request can be replayed within that window; values are small rendezvous
// data, so the window is accepted rather than keeping a nonce cache.
const (
	HeaderAuth      = "X-Hvd-Auth"
	HeaderTimestamp = "X-Hvd-Timestamp"
	// MaxClockSkew bounds |server clock - X-Hvd-Timestamp|.
	MaxClockSkew = 5 * time.Minute
)

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
