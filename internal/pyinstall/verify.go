package pyinstall

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
)

// Problem is a file that does not match its RECORD row.
type Problem struct {
	Path string
	Kind string // "missing", "modified"
	Want string // RECORD's hash and size
	Got  string
}

func (p Problem) String() string {
	if p.Kind == "missing" {
		return fmt.Sprintf("%s: missing", p.Path)
	}
	return fmt.Sprintf("%s: modified (RECORD %s, on disk %s)", p.Path, p.Want, p.Got)
}

// ErrVerify: files do not match the RECORD.
var ErrVerify = errors.New("pyinstall: installation does not match its RECORD")

// Verify re-hashes every file listed in the installation's RECORD. It
// returns the problems found (none for a clean installation).
func Verify(in *Installation) ([]Problem, error) {
	var out []Problem
	for _, e := range in.Record {
		if e.Hash == "" {
			continue // RECORD's own row
		}
		h, n, err := HashFile(filepath.Join(in.Site, filepath.FromSlash(e.Path)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out = append(out, Problem{Path: e.Path, Kind: "missing"})
		case err != nil:
			return nil, err
		case h != e.Hash || n != e.Size:
			out = append(out, Problem{Path: e.Path, Kind: "modified",
				Want: fmt.Sprintf("%s %d bytes", e.Hash, e.Size), Got: fmt.Sprintf("%s %d bytes", h, n)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// FrameworkState summarizes Verify's problems for one framework's files:
// "ok", or "N files modified/missing".
func FrameworkState(e *FrameworkEntry, problems []Problem) string {
	files := map[string]bool{}
	for _, f := range e.Files {
		files[f] = true
	}
	n := 0
	for _, p := range problems {
		if files[p.Path] {
			n++
		}
	}
	if n == 0 {
		return "ok"
	}
	return fmt.Sprintf("%d file(s) modified or missing", n)
}
