package plugin

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// File is one generated file. Path is slash-separated and relative to the
// destination the host chooses.
type File struct {
	Path string
	Data []byte
	Mode fs.FileMode // permission bits only: 0644, or 0755 for executables
}

// FileSet is what Generate returns: files in Path order.
type FileSet struct {
	Files []File
	// Summary is text for the user that the host prints after writing
	// the files and never writes itself (the split generator's partition
	// and topology tables). Optional.
	Summary string
}

// Add appends a file with mode 0644 and returns the set.
func (s *FileSet) Add(p string, data []byte) *FileSet {
	s.Files = append(s.Files, File{Path: p, Data: data, Mode: 0o644})
	return s
}

// Sort orders the files by path.
func (s *FileSet) Sort() {
	sort.Slice(s.Files, func(i, j int) bool { return s.Files[i].Path < s.Files[j].Path })
}

// Paths returns the paths in order.
func (s *FileSet) Paths() []string {
	out := make([]string, len(s.Files))
	for i, f := range s.Files {
		out[i] = f.Path
	}
	return out
}

// Lookup returns the file at p.
func (s *FileSet) Lookup(p string) (File, bool) {
	for _, f := range s.Files {
		if f.Path == p {
			return f, true
		}
	}
	return File{}, false
}

// Validate checks what a host must check before writing a plugin's files:
// every path is relative, clean, slash-separated, without "..", unique, and
// modes carry permission bits only. The error names the offending path.
func (s *FileSet) Validate() error {
	seen := make(map[string]bool, len(s.Files))
	for i, f := range s.Files {
		if err := validPath(f.Path); err != nil {
			return fmt.Errorf("%w: file %d: %v", ErrProtocol, i, err)
		}
		if seen[f.Path] {
			return fmt.Errorf("%w: file %d: duplicate path %q", ErrProtocol, i, f.Path)
		}
		seen[f.Path] = true
		if f.Mode&^fs.ModePerm != 0 {
			return fmt.Errorf("%w: file %q: mode %v is not plain permission bits", ErrProtocol, f.Path, f.Mode)
		}
	}
	return nil
}

func validPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case strings.ContainsRune(p, '\\') || strings.ContainsRune(p, 0):
		return fmt.Errorf("path %q has a backslash or NUL", p)
	case path.IsAbs(p):
		return fmt.Errorf("path %q is absolute", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean (want %q)", p, path.Clean(p))
	case p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("path %q leaves the destination", p)
	case p == ".":
		return fmt.Errorf("path %q is the destination itself", p)
	}
	return nil
}

// FromFS builds a file set from every regular file under root in fsys
// (paths keep the root prefix; mode 0644), skipping what skip reports
// true for (it gets the slash path and whether it is a directory).
func FromFS(fsys fs.FS, root string, skip func(p string, dir bool) bool) (*FileSet, error) {
	set := &FileSet{}
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if skip != nil && skip(p, d.IsDir()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		set.Add(p, data)
		return nil
	})
	if err != nil {
		return nil, err
	}
	set.Sort()
	return set, nil
}
