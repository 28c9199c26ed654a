package rendezvous

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The header limit is what docs/security.md says: a request line and
// header block of MaxHeaderBytes is read, one a little larger is refused
// with 431 (issue 29: 9,000 bytes were accepted with "8 KiB" documented).
func TestHeaderLimit(t *testing.T) {
	s := newServer(t, []byte("secret"))
	status := func(total int) int {
		t.Helper()
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		head := "GET /a/k HTTP/1.1\r\nHost: x\r\n"
		const tail = "\r\n"
		pad := total - len(head) - len("X-Pad: \r\n") - len(tail)
		req := head + "X-Pad: " + strings.Repeat("p", pad) + "\r\n" + tail
		if len(req) != total {
			t.Fatalf("built %d bytes, want %d", len(req), total)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%d bytes: %v", total, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := status(MaxHeaderBytes - 200); code != http.StatusUnauthorized {
		t.Errorf("a header block of %d bytes: %d, want 401 (read, then refused for lack of a signature)", MaxHeaderBytes-200, code)
	}
	for _, n := range []int{MaxHeaderBytes + 200, 9000} {
		if code := status(n); code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a header block of %d bytes: %d, want 431 (limit %d)", n, code, MaxHeaderBytes)
		}
	}
}
