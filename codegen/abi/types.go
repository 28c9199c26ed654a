// Package abi describes hvd's C ABI (libhvd.so) once, as data, and
// generates both sides of it from that description: the cgo //export
// functions of cmd/libhvd (Go, through jennifer) and the ctypes layer of the
// Python package (python/hvd/common/_abi.py, through text/template).
//
// The generators are pure functions of a Spec (see Generate); the command
// in codegen/abi/genabi only reads and writes files.
package abi

import (
	"fmt"
	"regexp"
	"slices"
)

// Kind is the type of one logical argument. A logical argument may take
// more than one C parameter (a slice is a pointer and a count).
type Kind string

const (
	Int32   Kind = "int32"   // int32_t
	Int64   Kind = "int64"   // int64_t
	Float64 Kind = "float64" // double
	Bool    Kind = "bool"    // int32_t, 0 or 1
	// String is a NUL-terminated UTF-8 const char*; Go copies it.
	String Kind = "string"
	// Ptr is caller-owned memory (void*) that the engine reads or writes
	// in place until the operation completes; the caller keeps it alive.
	// Go never stores it in Go-visible memory beyond the operation.
	Ptr Kind = "ptr"
	// Int32s, Int64s and Ptrs are (pointer, int64 count) pairs, copied by Go
	// before the call returns; a negative count means "absent" (nil).
	Int32s Kind = "int32s"
	Int64s Kind = "int64s"
	Ptrs   Kind = "ptrs"
	// OutInt32s and OutInt64s are (pointer, int64 capacity) buffers that Go
	// fills; the function returns the number of elements it needed, so a
	// caller whose buffer was too small calls again with a larger one.
	OutInt32s Kind = "out_int32s"
	OutInt64s Kind = "out_int64s"
)

var kinds = []Kind{Int32, Int64, Float64, Bool, String, Ptr, Int32s, Int64s, Ptrs, OutInt32s, OutInt64s}

// IsSlice reports whether the kind is passed as (pointer, count).
func (k Kind) IsSlice() bool {
	switch k {
	case Int32s, Int64s, Ptrs, OutInt32s, OutInt64s:
		return true
	}
	return false
}

// IsOut reports whether Go writes into the argument.
func (k Kind) IsOut() bool { return k == OutInt32s || k == OutInt64s }

// Arg is one logical argument.
type Arg struct {
	Name string `json:"name"` // snake_case; the C parameter and Python argument name
	Kind Kind   `json:"kind"`
	Doc  string `json:"doc,omitempty"`
}

// Phase says which Python exceptions a function's errors become: at "call"
// time (enqueue) invalid arguments are ValueError; at "sync" time every
// failure is HorovodInternalError, as in Horovod.
type Phase string

const (
	PhaseCall Phase = "call"
	PhaseSync Phase = "sync"
)

// Func is one exported C function, hvd_<Name>.
type Func struct {
	Name string `json:"name"` // snake_case, without the prefix
	Doc  string `json:"doc"`
	Args []Arg  `json:"args"`
	// Returns is Int32 or Int64. Functions with Errors return a value >= 0
	// on success and -code on failure, with the message in the caller's
	// error buffer (two extra C parameters: char *err, int64_t err_len).
	Returns Kind  `json:"returns"`
	Errors  bool  `json:"errors"`
	Phase   Phase `json:"phase,omitempty"`
	// Defaults gives trailing arguments a default in the Python function
	// (a Python expression by argument name), so that an argument added at
	// the end keeps older Python callers working. C has no defaults.
	Defaults map[string]string `json:"defaults,omitempty"`
}

// ErrorCode is one failure class of the ABI and the Python exception it
// becomes at call time.
type ErrorCode struct {
	Name   string `json:"name"` // UPPER_SNAKE
	Code   int    `json:"code"` // > 0; returned negated
	Python string `json:"python"`
	Doc    string `json:"doc"`
}

// EnumValue and Enum are constants shared by both sides (dtypes, ops).
type EnumValue struct {
	Name  string `json:"name"`
	Value int    `json:"value"`
}

type Enum struct {
	Name   string      `json:"name"`
	Doc    string      `json:"doc"`
	Values []EnumValue `json:"values"`
}

// Spec is the whole ABI.
type Spec struct {
	// Version is checked at load time: the Python package refuses a
	// library built from another version of the spec.
	Version int `json:"version"`
	// Prefix of every C symbol ("hvd_").
	Prefix string `json:"prefix"`
	// GoPackage is the import path of the package the Go side is generated
	// into (a main package built with -buildmode=c-shared).
	GoPackage string      `json:"go_package"`
	Errors    []ErrorCode `json:"errors"`
	Enums     []Enum      `json:"enums"`
	Funcs     []Func      `json:"funcs"`
}

var (
	snake = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	upper = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	// Names that cannot be parameters on one of the two sides.
	reserved = []string{
		"and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif", "else",
		"except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal", "not",
		"or", "pass", "raise", "return", "try", "while", "with", "yield", "none", "true", "false",
		"chan", "default", "defer", "func", "go", "goto", "interface", "map", "package", "range", "select",
		"struct", "switch", "type", "var", "err", "err_len", "ret", "len", "cap", "copy", "string",
	}
)

// Validate checks the spec: names, kinds, codes, and the rules the
// generators rely on (at most one output buffer, last).
func (s *Spec) Validate() error {
	if s.Version <= 0 {
		return fmt.Errorf("abi: spec version %d must be positive", s.Version)
	}
	if !snake.MatchString(s.Prefix) {
		return fmt.Errorf("abi: prefix %q is not snake_case", s.Prefix)
	}
	if s.GoPackage == "" {
		return fmt.Errorf("abi: go_package is empty")
	}
	codes := map[int]string{}
	for _, e := range s.Errors {
		if !upper.MatchString(e.Name) || e.Code <= 0 {
			return fmt.Errorf("abi: error %q code %d: want UPPER_SNAKE and a positive code", e.Name, e.Code)
		}
		if prev, dup := codes[e.Code]; dup {
			return fmt.Errorf("abi: errors %s and %s share code %d", prev, e.Name, e.Code)
		}
		switch e.Python {
		case "ValueError", "HorovodInternalError", "NotImplementedError", "RuntimeError":
		default:
			return fmt.Errorf("abi: error %s: unknown Python exception %q", e.Name, e.Python)
		}
		codes[e.Code] = e.Name
	}
	for _, en := range s.Enums {
		if !upper.MatchString(en.Name) {
			return fmt.Errorf("abi: enum %q is not UPPER_SNAKE", en.Name)
		}
		for _, v := range en.Values {
			if !upper.MatchString(v.Name) {
				return fmt.Errorf("abi: enum %s value %q is not UPPER_SNAKE", en.Name, v.Name)
			}
		}
	}
	seen := map[string]bool{}
	for _, f := range s.Funcs {
		if !snake.MatchString(f.Name) || seen[f.Name] {
			return fmt.Errorf("abi: function %q: not snake_case or defined twice", f.Name)
		}
		seen[f.Name] = true
		if f.Returns != Int32 && f.Returns != Int64 {
			return fmt.Errorf("abi: function %s returns %q; want int32 or int64", f.Name, f.Returns)
		}
		if f.Errors != (f.Phase != "") {
			return fmt.Errorf("abi: function %s: a phase is required exactly when errors is set", f.Name)
		}
		if f.Phase != "" && f.Phase != PhaseCall && f.Phase != PhaseSync {
			return fmt.Errorf("abi: function %s: unknown phase %q", f.Name, f.Phase)
		}
		args := map[string]bool{}
		for i, a := range f.Args {
			if !snake.MatchString(a.Name) || slices.Contains(reserved, a.Name) || args[a.Name] {
				return fmt.Errorf("abi: function %s: argument %q is not snake_case, is reserved, or repeats", f.Name, a.Name)
			}
			args[a.Name] = true
			if !slices.Contains(kinds, a.Kind) {
				return fmt.Errorf("abi: function %s argument %s: unknown kind %q", f.Name, a.Name, a.Kind)
			}
			if a.Kind.IsOut() && i != len(f.Args)-1 {
				return fmt.Errorf("abi: function %s: the output buffer %s must be the last argument", f.Name, a.Name)
			}
		}
		defaulted := false
		for _, a := range f.Args {
			_, has := f.Defaults[a.Name]
			switch {
			case has && a.Kind.IsOut():
				return fmt.Errorf("abi: function %s: the output buffer %s cannot have a default", f.Name, a.Name)
			case has:
				defaulted = true
			case defaulted && !a.Kind.IsOut():
				return fmt.Errorf("abi: function %s: argument %s follows an argument with a default and has none", f.Name, a.Name)
			}
		}
		for name := range f.Defaults {
			if !args[name] {
				return fmt.Errorf("abi: function %s: a default for %q, which is not an argument", f.Name, name)
			}
		}
	}
	return nil
}
