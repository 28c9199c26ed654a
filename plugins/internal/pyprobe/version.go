package pyprobe

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Range is a set of version constraints such as ">=1.13,<3", all of which
// must hold. Versions compare by their numeric release segment only
// (PEP 440's N.N.N): pre-release, post-release and local parts are ignored,
// so Debian's torch "1.13.0a0+git…" counts as 1.13.0.
type Range struct {
	src   string
	terms []term
}

type term struct {
	op  string
	ver []int
}

// ParseRange parses comma-separated clauses with operators >=, >, <=, <,
// ==, != (e.g. ">=2.6,<3").
func ParseRange(s string) (Range, error) {
	r := Range{src: s}
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			return Range{}, fmt.Errorf("version range %q: empty clause", s)
		}
		var op string
		for _, o := range []string{">=", "<=", "==", "!=", ">", "<"} {
			if strings.HasPrefix(c, o) {
				op = o
				break
			}
		}
		if op == "" {
			return Range{}, fmt.Errorf("version range %q: clause %q needs an operator (>=, >, <=, <, ==, !=)", s, c)
		}
		v, err := Release(strings.TrimSpace(c[len(op):]))
		if err != nil {
			return Range{}, fmt.Errorf("version range %q: %v", s, err)
		}
		r.terms = append(r.terms, term{op, v})
	}
	return r, nil
}

// MustRange is ParseRange for constants.
func MustRange(s string) Range {
	r, err := ParseRange(s)
	if err != nil {
		panic(err)
	}
	return r
}

func (r Range) String() string { return r.src }

// Contains reports whether version satisfies every clause; an unparsable
// version is not contained.
func (r Range) Contains(version string) bool {
	v, err := Release(version)
	if err != nil {
		return false
	}
	for _, t := range r.terms {
		c := compare(v, t.ver)
		ok := false
		switch t.op {
		case ">=":
			ok = c >= 0
		case ">":
			ok = c > 0
		case "<=":
			ok = c <= 0
		case "<":
			ok = c < 0
		case "==":
			ok = c == 0
		case "!=":
			ok = c != 0
		}
		if !ok {
			return false
		}
	}
	return true
}

var releaseRE = regexp.MustCompile(`^v?(\d+(?:\.\d+)*)`)

// Release returns the numeric release segment of a version string
// ("1.13.0a0+git" → [1 13 0]).
func Release(version string) ([]int, error) {
	m := releaseRE.FindStringSubmatch(strings.TrimSpace(version))
	if m == nil {
		return nil, fmt.Errorf("version %q does not start with a number", version)
	}
	parts := strings.Split(m[1], ".")
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("version %q: %v", version, err)
		}
		out[i] = n
	}
	return out, nil
}

func compare(a, b []int) int {
	for i := 0; i < len(a) || i < len(b); i++ {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}
