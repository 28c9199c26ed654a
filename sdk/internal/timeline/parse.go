package timeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Event is one trace event as read back by ParseFile. Fields absent from the
// file are zero (metadata events have no ts; End events of Horovod's own files
// have no name).
type Event struct {
	Name  string         `json:"name"`
	Ph    string         `json:"ph"` // "M" metadata, "B"/"E" begin/end, "i" instant
	Ts    float64        `json:"ts"` // microseconds since the timeline was opened
	Pid   int            `json:"pid"`
	Tid   int            `json:"tid"`
	Scope string         `json:"s,omitempty"` // instant events: "g", "p" or "t"
	Args  map[string]any `json:"args,omitempty"`
}

// ParseFile reads a trace-event JSON array file such as a Timeline writes, and
// returns its events in file order. Besides strict JSON it accepts what a
// process that died before Close leaves behind, or what Horovod writes: a
// missing closing "]", a trailing comma (before "]" or at the end of the
// file), and a last event cut off by the end of the file (it is dropped).
// Anything else that is not JSON is an error. It may be called on a file that
// is still being written.
func ParseFile(path string) ([]Event, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hvd: timeline: %w", err)
	}
	evs, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("hvd: timeline: parsing %s: %w", path, err)
	}
	return evs, nil
}

// parse is ParseFile on bytes.
func parse(data []byte) ([]Event, error) {
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '[' {
		return nil, errors.New("not a trace-event JSON array: the data does not start with \"[\"")
	}
	i++
	evs := []Event{}
	needComma := false // an event was read and no "," has followed it yet
	for {
		i = skipSpace(data, i)
		if i == len(data) {
			return evs, nil // no closing "]": written incrementally, process died
		}
		switch data[i] {
		case ']':
			if j := skipSpace(data, i+1); j != len(data) {
				return nil, fmt.Errorf("offset %d: unexpected data after the closing \"]\"", j)
			}
			return evs, nil
		case ',':
			if !needComma {
				return nil, fmt.Errorf("offset %d: unexpected \",\"", i)
			}
			needComma = false
			i++
			continue
		}
		if needComma {
			return nil, fmt.Errorf("offset %d: missing \",\" after event %d", i, len(evs)-1)
		}
		dec := json.NewDecoder(bytes.NewReader(data[i:]))
		var ev Event
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return evs, nil // the last event was cut off by the end of the data
			}
			return nil, fmt.Errorf("offset %d: event %d: %w", i, len(evs), err)
		}
		evs = append(evs, ev)
		i += int(dec.InputOffset())
		needComma = true
	}
}

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
