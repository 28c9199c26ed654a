package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Bounds on the work locateSyntaxError does: it parses prefixes of the file,
// about log2(lines) of them for the line and up to maxLinearLine for the
// column.
const (
	maxLocateLines = 2000
	maxLocateBytes = 128 << 10
	maxLocateLine  = 4096 // bytes of the offending line searched for the column
	maxLinearLine  = 160  // longer lines are bisected for the column
)

// yamlError returns the error yaml.v3 reports for data ("" when data is
// well-formed YAML, any number of documents).
func yamlError(data []byte) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint("panic: ", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return err.Error()
		}
	}
}

// locateSyntaxError finds the line and column where malformed YAML goes
// wrong. yaml.v3 names the line where the enclosing block or flow began
// (its "context"), not the line that breaks it: an under-indented key on
// line 6 is reported at line 5. The line that breaks the file is the first
// whose prefix of the file (up to and including it) already fails with the
// very error the whole file fails with; the column is one past the longest
// prefix of that line that is still valid YAML or, when none is (the line
// is inside a flow collection an earlier line opened), the line's first
// non-blank character. A flow collection broken on a later line than the
// one that opens it can be placed at the opening line (a truncated prefix
// fails with the same message). It returns 0, 0 when the file is too large
// to search or no prefix reproduces the error.
func locateSyntaxError(data []byte) (line, col int) {
	if len(data) > maxLocateBytes || bytes.Count(data, []byte("\n")) > maxLocateLines {
		return 0, 0
	}
	full := yamlError(data)
	if full == "" {
		return 0, 0
	}
	var ends []int // byte offset just past each line (its newline included)
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	// The smallest k whose prefix reproduces the error, by bisection: once
	// a prefix holds the broken spot it fails as the whole file does, and a
	// shorter one parses or fails otherwise (an unfinished flow collection
	// can fail alike: see above).
	lo, hi := 0, len(ends)-1 // ends[hi] == len(data) reproduces it
	for lo < hi {
		mid := (lo + hi) / 2
		if yamlError(data[:ends[mid]]) == full {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	k := lo
	from := 0
	if k > 0 {
		from = ends[k-1]
	}
	text := strings.TrimRight(string(data[from:ends[k]]), "\r\n")
	if len(text) > maxLocateLine {
		return k + 1, 0
	}
	runeCol := func(c int) int { return utf8.RuneCountInString(text[:c]) + 1 }
	valid := func(c int) bool { return yamlError(data[:from+c]) == "" }
	if len(text) <= maxLinearLine {
		for c := len(text) - 1; c >= 0; c-- {
			if utf8.RuneStart(text[c]) && valid(c) {
				return k + 1, runeCol(c)
			}
		}
	} else if valid(0) {
		lo, hi := 0, len(text)-1 // valid(lo); the largest valid prefix, by bisection
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if valid(mid) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		for lo > 0 && !utf8.RuneStart(text[lo]) {
			lo--
		}
		return k + 1, runeCol(lo)
	}
	// Inside a flow collection left open by an earlier line every prefix
	// fails, and a truncated one with the same message: point at the
	// line's first character.
	return k + 1, runeCol(len(text) - len(strings.TrimLeft(text, " ")))
}
