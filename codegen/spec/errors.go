package spec

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrInvalid is wrapped by every error Parse, Validate and Marshal return
// for a bad spec: errors.Is(err, spec.ErrInvalid).
var ErrInvalid = errors.New("spec: invalid hvd.yaml")

// Error is one problem in a spec, with where it is.
type Error struct {
	File   string // the name given to Parse; "" for a Spec built in Go
	Line   int    // 1-based; 0 when unknown
	Column int    // 1-based; 0 when unknown
	Path   string // the key path, e.g. "parallel.stages"; "" for the whole file
	Msg    string // what is wrong and what was expected
}

// Error formats as file:line:column: path: message, leaving out the parts
// that are unknown.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, "%d:", e.Column)
		}
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes errors.Is(e, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// ErrorList is every problem found in a spec, in file order. Its message is
// one problem per line.
type ErrorList []*Error

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the problems, so that errors.As(err, &*spec.Error) finds
// the first one.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// Is makes errors.Is(l, ErrInvalid) true.
func (l ErrorList) Is(target error) bool { return target == ErrInvalid }

// sorted orders problems by position (unknown positions last, in the order
// they were found) and returns nil for an empty list.
func (l ErrorList) sorted() error {
	if len(l) == 0 {
		return nil
	}
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i], l[j]
		if (a.Line == 0) != (b.Line == 0) {
			return b.Line == 0
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return l
}
