package split

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hvdorg/hvd/codegen/spec"
)

// pyLiteral writes a spec argument value as a Python literal: None,
// True/False, an int, a float (always with a '.' or an exponent, so 2.0
// stays a float), a double-quoted string, or a list.
func pyLiteral(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case float64:
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEn") { // n: NaN/Inf cannot occur (spec rejects them)
			s += ".0"
		}
		return s
	case string:
		// Go's quoting of valid UTF-8 (\n, \t, \", \\, \xNN below 0x80,
		// \uNNNN, \UNNNNNNNN for non-printable runes) is valid Python.
		return strconv.Quote(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyLiteral(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	panic(fmt.Sprintf("split: no Python literal for %T", v))
}

// pyKwargs writes keyword arguments: in_features=16, out_features=64.
func pyKwargs(a []spec.Arg) string {
	parts := make([]string, len(a))
	for i, x := range a {
		parts[i] = x.Name + "=" + pyLiteral(x.Value)
	}
	return strings.Join(parts, ", ")
}

// pyShape writes a shape as a Python tuple: (16,), (3, 32, 32), ().
func pyShape(s []int) string {
	switch len(s) {
	case 0:
		return "()"
	case 1:
		return fmt.Sprintf("(%d,)", s[0])
	}
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
