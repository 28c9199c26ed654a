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

// Bounds on the work locateSyntaxError does (it parses prefixes of the
// file, so its cost grows with the square of the file's size).
const (
	maxLocateLines = 2000
	maxLocateBytes = 128 << 10
	maxLocateLine  = 1000 // bytes of the offending line searched for the column
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
	k := -1
	for i, end := range ends {
		if yamlError(data[:end]) == full {
			k = i
			break
		}
	}
	if k < 0 {
		return 0, 0
	}
	from := 0
	if k > 0 {
		from = ends[k-1]
	}
	text := strings.TrimRight(string(data[from:ends[k]]), "\r\n")
	if len(text) > maxLocateLine {
		return k + 1, 0
	}
	runeCol := func(c int) int { return utf8.RuneCountInString(text[:c]) + 1 }
	for c := len(text) - 1; c >= 0; c-- {
		if utf8.RuneStart(text[c]) && yamlError(data[:from+c]) == "" {
			return k + 1, runeCol(c)
		}
	}
	// Inside a flow collection left open by an earlier line every prefix
	// fails, and a truncated one with the same message: point at the
	// line's first character.
	return k + 1, runeCol(len(text) - len(strings.TrimLeft(text, " ")))
}
