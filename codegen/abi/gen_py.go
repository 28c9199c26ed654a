package abi

import (
	"bytes"
	_ "embed"
	"strings"
	"text/template"
)

//go:embed abi.py.tmpl
var pyTemplate string

var pyTmpl = template.Must(template.New("abi.py").Funcs(template.FuncMap{
	"upper":    strings.ToUpper,
	"ctypes":   pyCtypes,
	"pyArgs":   pyArgs,
	"callArgs": pyCallArgs,
	"prep":     pyPrep,
	"outArg":   outArg,
	"outCtype": outCtype,
	"header":   func() string { return Header },
}).Parse(pyTemplate))

// PyFile generates the ctypes side: constants, the prototype of every
// function (argtypes/restype), and one Python function per C function that
// converts arguments, passes an error buffer, and raises through the
// package's error hook.
func PyFile(s *Spec) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := pyTmpl.Execute(&b, s); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func pyCtypes(f Func) string {
	var ts []string
	for _, a := range f.Args {
		switch a.Kind {
		case Int32, Bool:
			ts = append(ts, "ctypes.c_int32")
		case Int64:
			ts = append(ts, "ctypes.c_int64")
		case Float64:
			ts = append(ts, "ctypes.c_double")
		case String:
			ts = append(ts, "ctypes.c_char_p")
		case Ptr:
			ts = append(ts, "ctypes.c_void_p")
		case Int32s, OutInt32s:
			ts = append(ts, "ctypes.POINTER(ctypes.c_int32)", "ctypes.c_int64")
		case Int64s, OutInt64s:
			ts = append(ts, "ctypes.POINTER(ctypes.c_int64)", "ctypes.c_int64")
		case Ptrs:
			ts = append(ts, "ctypes.POINTER(ctypes.c_void_p)", "ctypes.c_int64")
		}
	}
	if f.Errors {
		ts = append(ts, "ctypes.c_char_p", "ctypes.c_int64")
	}
	return "[" + strings.Join(ts, ", ") + "]"
}

// pyArgs is the Python signature: every argument but the output buffer.
func pyArgs(f Func) string {
	var ns []string
	for _, a := range f.Args {
		if !a.Kind.IsOut() {
			if d, ok := f.Defaults[a.Name]; ok {
				ns = append(ns, a.Name+"="+d)
				continue
			}
			ns = append(ns, a.Name)
		}
	}
	return strings.Join(ns, ", ")
}

// pyPrep returns the statements converting arguments to ctypes values.
func pyPrep(f Func) []string {
	var out []string
	for _, a := range f.Args {
		switch a.Kind {
		case Int32s:
			out = append(out, "_"+a.Name+", _"+a.Name+"_len = _array(ctypes.c_int32, "+a.Name+")")
		case Int64s:
			out = append(out, "_"+a.Name+", _"+a.Name+"_len = _array(ctypes.c_int64, "+a.Name+")")
		case Ptrs:
			out = append(out, "_"+a.Name+", _"+a.Name+"_len = _array(ctypes.c_void_p, "+a.Name+")")
		case String:
			out = append(out, "_"+a.Name+" = ("+a.Name+" or '').encode('utf-8')")
		}
	}
	return out
}

func pyCallArgs(f Func) string {
	var cs []string
	for _, a := range f.Args {
		switch a.Kind {
		case Int32s, Int64s, Ptrs:
			cs = append(cs, "_"+a.Name, "_"+a.Name+"_len")
		case OutInt32s, OutInt64s:
			cs = append(cs, "_buf", "_cap")
		case String:
			cs = append(cs, "_"+a.Name)
		case Bool:
			cs = append(cs, "1 if "+a.Name+" else 0")
		default:
			cs = append(cs, a.Name)
		}
	}
	if f.Errors {
		cs = append(cs, "_err", "ERR_LEN")
	}
	return strings.Join(cs, ", ")
}

func outArg(f Func) *Arg {
	for i := range f.Args {
		if f.Args[i].Kind.IsOut() {
			return &f.Args[i]
		}
	}
	return nil
}

func outCtype(a *Arg) string {
	if a.Kind == OutInt64s {
		return "ctypes.c_int64"
	}
	return "ctypes.c_int32"
}
