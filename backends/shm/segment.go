package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Segment files live in /dev/shm (POSIX shared memory, what shm_open uses) as
// hvd-<uid>-<creator pid>-<nonce>. They exist on the file system only while a
// communicator is being built: the member that maps it last unlinks it, so a
// segment outlives its job only if a rank is killed during those few
// milliseconds; the next job's creator removes such orphans (their creator
// pid is gone) before making its own.
var shmDir = "/dev/shm"

const segPrefix = "hvd-"

// segment is one mapped file.
type segment struct {
	mem  []byte
	path string
}

func segmentName(nonce uint64) string {
	return fmt.Sprintf("%s%d-%d-%016x", segPrefix, os.Getuid(), os.Getpid(), nonce)
}

// createSegment makes and maps a new zero-filled segment of size bytes.
func createSegment(name string, size int) (*segment, error) {
	sweepOrphans()
	path := filepath.Join(shmDir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Unlink(path)
		return nil, fmt.Errorf("size %s to %d bytes: %w", path, size, err)
	}
	// Reserve the pages now so that a full /dev/shm is an error here, not a
	// SIGBUS in the middle of a collective.
	if err := unix.Fallocate(fd, 0, 0, int64(size)); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		unix.Unlink(path)
		return nil, fmt.Errorf("reserve %d bytes in %s: %w", size, shmDir, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Unlink(path)
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return &segment{mem: mem, path: path}, nil
}

// openSegment maps an existing segment and checks its size.
func openSegment(name string, size int) (*segment, error) {
	if strings.ContainsAny(name, "/\x00") || !strings.HasPrefix(name, segPrefix) {
		return nil, fmt.Errorf("bad segment name %q", name)
	}
	path := filepath.Join(shmDir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size != int64(size) {
		return nil, fmt.Errorf("%s has %d bytes, want %d (a different hvd version?)", path, st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return &segment{mem: mem, path: path}, nil
}

// unlink removes the name; mappings stay valid. Idempotent.
func (s *segment) unlink() {
	if s.path != "" {
		unix.Unlink(s.path)
	}
}

func (s *segment) unmap() {
	if s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}

// sweepOrphans removes this user's segments whose creator process is gone.
// A live creator (or a reused pid) keeps its file: removing a live job's
// segment would break it, leaving a dead one's only costs memory.
func sweepOrphans() {
	ents, err := os.ReadDir(shmDir)
	if err != nil {
		return
	}
	uid := strconv.Itoa(os.Getuid())
	for _, e := range ents {
		parts := strings.Split(strings.TrimPrefix(e.Name(), segPrefix), "-")
		if !strings.HasPrefix(e.Name(), segPrefix) || len(parts) != 3 || parts[0] != uid {
			continue
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			os.Remove(filepath.Join(shmDir, e.Name()))
		}
	}
}

// Typed views into the mapping. Offsets are fixed by the layout in comm.go
// and always 8-byte aligned (the mapping itself is page aligned).
func (s *segment) u64(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off]))
}

func (s *segment) u32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s.mem[off]))
}
