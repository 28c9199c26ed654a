package rendezvous

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// FuzzParsePath: parsePath never panics, accepts only two non-empty
// segments, and what it accepts re-escapes to a path it parses the same way.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/global/rank_0", "/a/b%2Fc", "/a/b/c", "/a", "//", "/a/", "/%zz/k", "/sc%20ope/k%3Fq", "", "a/b", "/a/%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		scope, key, err := parsePath(p)
		if err != nil {
			return
		}
		if scope == "" || key == "" {
			t.Fatalf("%q parsed to empty scope or key", p)
		}
		if strings.Count(p, "/") != 2 {
			t.Fatalf("%q has %d slashes but parsed", p, strings.Count(p, "/"))
		}
		s2, k2, err := parsePath(keyPath(scope, key))
		if err != nil || s2 != scope || k2 != key {
			t.Fatalf("%q -> (%q, %q) -> %q -> (%q, %q, %v)", p, scope, key, keyPath(scope, key), s2, k2, err)
		}
	})
}

// FuzzKeyPathRoundTrip: any non-empty scope and key survive escaping, also
// through net/url as the HTTP client and server see it.
func FuzzKeyPathRoundTrip(f *testing.F) {
	f.Add("global", "rank_0")
	f.Add("local_host/1", "a/b?c#d")
	f.Add("%", "..")
	f.Fuzz(func(t *testing.T, scope, key string) {
		if scope == "" || key == "" {
			return
		}
		p := keyPath(scope, key)
		u, err := url.Parse("http://h" + p)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		s2, k2, err := parsePath(u.EscapedPath())
		if err != nil || s2 != scope || k2 != key {
			t.Fatalf("(%q, %q) -> %q -> (%q, %q, %v)", scope, key, p, s2, k2, err)
		}
	})
}

// FuzzParseTasksPerNode: no panics, bounded output, positive counts.
//
// It once failed without saving its input: "1,1(x9223372036854775807)" made
// the node-count check overflow (len(out)+m wrapped negative), so the parser
// appended without end until the fuzz worker was killed for memory; Go's
// fuzzer records panics and failures, not OOM kills (golang/go#47572), so
// nothing reached testdata/fuzz. The input is now in the seed corpus
// (testdata/fuzz/FuzzParseTasksPerNode) and in TestParseTasksPerNodeOverflow.
func FuzzParseTasksPerNode(f *testing.F) {
	for _, s := range []string{"4", "2(x3),1", "1(x99999999)", "2(x", "(x)", ",,", "1,1(x9223372036854775807)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := parseTasksPerNode(s)
		if err != nil {
			return
		}
		if len(out) == 0 || len(out) > maxSlurmNodes {
			t.Fatalf("%q -> %d nodes", s, len(out))
		}
		for _, n := range out {
			if n < 1 {
				t.Fatalf("%q -> count %d", s, n)
			}
		}
	})
}

// TestParseTasksPerNodeOverflow: a repeat count that overflows the node
// bound is refused at once. Before the fix it looped, allocating, forever;
// the goroutine and deadline make that a failure instead of a hang.
func TestParseTasksPerNodeOverflow(t *testing.T) {
	for _, s := range []string{"1,1(x9223372036854775807)", "3(x65535),1(x9223372036854775807)", "1(x65536),1"} {
		done := make(chan error, 1)
		go func() {
			_, err := parseTasksPerNode(s)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "more than") {
				t.Errorf("%q: got %v, want a 'more than N nodes' error", s, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%q: parseTasksPerNode still running after 2 s (unbounded expansion)", s)
		}
	}
}
