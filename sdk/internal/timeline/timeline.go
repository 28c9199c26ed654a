package timeline

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Thread ids inside each tensor's trace process.
const (
	tidNegotiate = 0 // NEGOTIATE_<OP> and the per-rank ready ticks
	tidExecute   = 1 // the top-level op and its nested activities
)

// Writer tuning. The writer goroutine writes a batch at most flushInterval
// after the first event of the batch was recorded, at once when
// flushThreshold bytes are pending, and callers wait (without holding the
// lock) only when maxPending bytes are pending because the disk cannot keep
// up.
const (
	flushInterval  = 250 * time.Millisecond
	flushThreshold = 256 << 10
	maxPending     = 16 << 20
)

// Timeline records Horovod timeline events into a Chrome trace-event JSON
// file (see the package documentation for the format).
//
// All methods are safe for concurrent use by several goroutines. A nil
// *Timeline is valid and every method on it does nothing, so callers need
// not check whether a timeline is enabled. Methods called after Close do
// nothing.
//
// Recording methods never write to disk themselves: they format the event
// into an in-memory buffer under a mutex and return; a writer goroutine
// started by Open writes the buffer to the file. They block only if more
// than 16 MiB are waiting to be written (the disk cannot keep up), and then
// without holding the lock.
//
// Per tensor name the timeline keeps a small state machine; calls that do
// not fit it are skipped, so the file always stays balanced:
//
//   - NegotiateStart while the tensor is already negotiating is skipped (the
//     first call wins, as in Horovod, where a cached response can restart
//     negotiation); NegotiateRankReady and NegotiateEnd without an open
//     negotiation are skipped.
//   - Start while the tensor's op is open is skipped; ActivityStart without an
//     open op is skipped; ActivityStart while an activity is open first ends
//     that activity (activities are sequential, one level deep);
//     ActivityEnd without an open activity is skipped; End without an open
//     op is skipped, and End ends an open activity first.
//   - Close ends every slice still open, with args {"unfinished":true}.
//
// Negotiation (tid 0) and execution (tid 1) are independent, so a tensor may
// negotiate again while its previous op still executes. State is keyed by
// name only: if the same name can be in flight in two process sets at once,
// the caller must make the names distinct (e.g. prefix the set id).
type Timeline struct {
	path       string
	markCycles bool
	start      time.Time      // monotonic origin of ts
	w          io.WriteCloser // written only by the writer goroutine, closed by Close after it exits
	interval   time.Duration
	threshold  int
	limit      int

	wake      chan struct{} // capacity 1; nudges the writer goroutine
	done      chan struct{} // closed when the writer goroutine has exited
	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	cond     sync.Cond // L is &mu; broadcast after every batch the writer handles
	pending  []byte    // formatted events not yet handed to the writer
	spare    []byte    // the previous batch's buffer, reused
	appended int64     // bytes ever appended to pending
	written  int64     // bytes ever taken from pending and written (or dropped after an error)
	flushers int       // goroutines waiting in Flush
	closed   bool
	err      error // first write error; once set, events are dropped
	tracks   map[string]*track
	lastPid  int
}

// track is the state of one tensor name. The string fields hold the
// JSON-quoted name of the open slice, "" when none is open.
type track struct {
	pid         int
	negotiating string
	op          string
	activity    string
}

// Open creates (or truncates) the file at path, writes the header (the
// start-time metadata) to it and starts the writer goroutine. markCycles
// enables MarkCycleStart. The caller must call Close, which stops the
// goroutine and closes the file.
func Open(path string, markCycles bool) (*Timeline, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return nil, fmt.Errorf("hvd: timeline: cannot create the timeline file: %w", err)
	}
	t, err := newTimeline(f, path, markCycles, flushInterval, flushThreshold, maxPending)
	if err != nil {
		f.Close()
		return nil, err
	}
	return t, nil
}

// newTimeline writes the header to w synchronously and starts the writer
// goroutine; tests use it to inject writers and small limits.
func newTimeline(w io.WriteCloser, path string, markCycles bool, interval time.Duration, threshold, limit int) (*Timeline, error) {
	t := &Timeline{
		path:       path,
		markCycles: markCycles,
		start:      time.Now(),
		w:          w,
		interval:   interval,
		threshold:  threshold,
		limit:      limit,
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		tracks:     make(map[string]*track),
	}
	t.cond.L = &t.mu
	var hdr []byte
	hdr = append(hdr, "[\n"...)
	hdr = append(hdr, `{"name":"process_name","ph":"M","pid":0,"args":{"name":"hvd timeline","start_time_since_epoch_in_micros":`...)
	hdr = strconv.AppendInt(hdr, t.start.UnixMicro(), 10)
	hdr = append(hdr, "}}"...)
	hdr = append(hdr, ",\n"+`{"name":"process_sort_index","ph":"M","pid":0,"args":{"sort_index":0}}`...)
	if _, err := w.Write(hdr); err != nil {
		return nil, fmt.Errorf("hvd: timeline: writing %s: %w", path, err)
	}
	go t.run()
	return t, nil
}

// NegotiateStart begins the NEGOTIATE_<OP> slice of tensor (op is upper-cased,
// e.g. "allreduce" gives NEGOTIATE_ALLREDUCE). Skipped if the tensor is
// already negotiating.
func (t *Timeline) NegotiateStart(tensor string, op string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.acceptLocked() {
		return
	}
	tr := t.trackLocked(tensor)
	if tr.negotiating != "" {
		return
	}
	tr.negotiating = quote("NEGOTIATE_" + strings.ToUpper(op))
	t.eventLocked(tr.negotiating, 'B', tr.pid, tidNegotiate, "", "")
}

// NegotiateRankReady records that rank reported tensor ready: an instant
// event named by the rank number inside the negotiation slice. Skipped if the
// tensor is not negotiating.
func (t *Timeline) NegotiateRankReady(tensor string, rank int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.acceptLocked() {
		return
	}
	tr := t.tracks[tensor]
	if tr == nil || tr.negotiating == "" {
		return
	}
	t.eventLocked(`"`+strconv.Itoa(rank)+`"`, 'i', tr.pid, tidNegotiate, "p", "")
}

// NegotiateEnd ends the negotiation slice of tensor. Skipped if the tensor is
// not negotiating.
func (t *Timeline) NegotiateEnd(tensor string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.acceptLocked() {
		return
	}
	tr := t.tracks[tensor]
	if tr == nil || tr.negotiating == "" {
		return
	}
	t.eventLocked(tr.negotiating, 'E', tr.pid, tidNegotiate, "", "")
	tr.negotiating = ""
}

// Start begins the top-level op slice of tensor (op is upper-cased, e.g.
// "allreduce" gives ALLREDUCE). Skipped if the tensor's op is already open.
func (t *Timeline) Start(tensor string, op string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.acceptLocked() {
		return
	}
	tr := t.trackLocked(tensor)
	if tr.op != "" {
		return
	}
	tr.op = quote(strings.ToUpper(op))
	t.eventLocked(tr.op, 'B', tr.pid, tidExecute, "", "")
}

// ActivityStart begins a nested activity inside tensor's op, named exactly
// activity (e.g. "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "TCP_ALLREDUCE"). An
// open activity is ended first. Skipped if the tensor's op is not open.
func (t *Timeline) ActivityStart(tensor string, activity string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.acceptLocked() {
		return
	}
	tr := t.tracks[tensor]
	if tr == nil || tr.op == "" {
		return
	}
	if tr.activity != "" {
		t.eventLocked(tr.activity, 'E', tr.pid, tidExecute, "", "")
	}
	tr.activity = quote(activity)
	t.eventLocked(tr.activity, 'B', tr.pid, tidExecute, "", "")
}

// ActivityEnd ends tensor's open activity. Skipped if none is open.
func (t *Timeline) ActivityEnd(tensor string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.acceptLocked() {
		return
	}
	tr := t.tracks[tensor]
	if tr == nil || tr.activity == "" {
		return
	}
	t.eventLocked(tr.activity, 'E', tr.pid, tidExecute, "", "")
	tr.activity = ""
}

// End ends tensor's op slice (and its open activity, if any); the end event
// carries args {"dtype": dtype, "shape": "[d0, d1, …]"}. Skipped if the
// tensor's op is not open.
func (t *Timeline) End(tensor string, dtype string, shape []int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.acceptLocked() {
		return
	}
	tr := t.tracks[tensor]
	if tr == nil || tr.op == "" {
		return
	}
	if tr.activity != "" {
		t.eventLocked(tr.activity, 'E', tr.pid, tidExecute, "", "")
		tr.activity = ""
	}
	t.eventLocked(tr.op, 'E', tr.pid, tidExecute, "", `{"dtype":`+quote(dtype)+`,"shape":`+quote(FormatShape(shape))+`}`)
	tr.op = ""
}

// MarkCycleStart records a global instant event CYCLE_START on pid 0. It does
// nothing unless the timeline was opened with markCycles.
func (t *Timeline) MarkCycleStart() {
	if t == nil || !t.markCycles {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.acceptLocked() {
		return
	}
	t.eventLocked(`"CYCLE_START"`, 'i', 0, 0, "g", "")
}

// Flush blocks until every event recorded before the call has been written to
// the file (handed to the operating system; there is no fsync). It returns
// the first write error, if any. Callers need not call it: the writer
// goroutine writes within 250 ms of an event on its own.
func (t *Timeline) Flush() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	target := t.appended
	t.flushers++
	t.signal()
	for t.written < target && t.err == nil {
		t.cond.Wait()
	}
	t.flushers--
	return t.err
}

// Close ends every slice still open, writes the closing "]", waits for the
// writer goroutine to write everything and exit, and closes the file. It
// returns the first error met while writing or closing the file. Close is
// idempotent: later (or concurrent) calls wait for the first one and return
// the same error. Recording methods called after Close do nothing.
func (t *Timeline) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	if !t.closed {
		if t.err == nil {
			t.endAllLocked()
			t.appendLocked("\n]\n")
		}
		t.closed = true
		t.cond.Broadcast() // release callers waiting for room; they see closed
		t.signal()
	}
	t.mu.Unlock()
	t.closeOnce.Do(func() {
		<-t.done
		cerr := t.w.Close()
		t.mu.Lock()
		werr := t.err
		t.mu.Unlock()
		switch {
		case werr != nil:
			t.closeErr = werr
		case cerr != nil:
			t.closeErr = fmt.Errorf("hvd: timeline: closing %s: %w", t.path, cerr)
		}
	})
	return t.closeErr
}

// FormatShape formats a shape as Horovod's TensorShape::DebugString does:
// "[2, 3]", and "[]" for a scalar.
func FormatShape(shape []int64) string {
	b := make([]byte, 0, 2+8*len(shape))
	b = append(b, '[')
	for i, d := range shape {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendInt(b, d, 10)
	}
	return string(append(b, ']'))
}

// acceptLocked reports whether an event may be recorded now. While too much
// is pending it waits (releasing the lock) for the writer to catch up.
func (t *Timeline) acceptLocked() bool {
	for {
		if t.closed || t.err != nil {
			return false
		}
		if len(t.pending) < t.limit {
			return true
		}
		t.signal()
		t.cond.Wait()
	}
}

// trackLocked returns the state of tensor, assigning it the next pid and
// recording its metadata events the first time the name is seen.
func (t *Timeline) trackLocked(tensor string) *track {
	if tr := t.tracks[tensor]; tr != nil {
		return tr
	}
	t.lastPid++
	tr := &track{pid: t.lastPid}
	t.tracks[tensor] = tr
	pid := strconv.Itoa(tr.pid)
	t.appendLocked(",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":" + quote(tensor) + "}}" +
		",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"sort_index\":" + pid + "}}" +
		",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":\"negotiate\"}}" +
		",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":1,\"args\":{\"name\":\"execute\"}}")
	return tr
}

// eventLocked records one event timed now. name and args are JSON text (a
// quoted string and an object); scope and args are omitted when "".
func (t *Timeline) eventLocked(name string, ph byte, pid, tid int, scope, args string) {
	wasEmpty := len(t.pending) == 0
	n := len(t.pending)
	b := t.pending
	b = append(b, ",\n{\"name\":"...)
	b = append(b, name...)
	b = append(b, ",\"ph\":\""...)
	b = append(b, ph)
	b = append(b, "\",\"ts\":"...)
	b = strconv.AppendInt(b, time.Since(t.start).Microseconds(), 10)
	b = append(b, ",\"pid\":"...)
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, ",\"tid\":"...)
	b = strconv.AppendInt(b, int64(tid), 10)
	if scope != "" {
		b = append(b, ",\"s\":\""...)
		b = append(b, scope...)
		b = append(b, '"')
	}
	if args != "" {
		b = append(b, ",\"args\":"...)
		b = append(b, args...)
	}
	b = append(b, '}')
	t.pending = b
	t.appended += int64(len(b) - n)
	t.nudgeLocked(wasEmpty)
}

// appendLocked records raw JSON text.
func (t *Timeline) appendLocked(s string) {
	wasEmpty := len(t.pending) == 0
	t.pending = append(t.pending, s...)
	t.appended += int64(len(s))
	t.nudgeLocked(wasEmpty)
}

// nudgeLocked wakes the writer when a batch begins or grows large.
func (t *Timeline) nudgeLocked(wasEmpty bool) {
	if wasEmpty || len(t.pending) >= t.threshold {
		t.signal()
	}
}

// endAllLocked ends every open slice, in pid order, marking it unfinished.
func (t *Timeline) endAllLocked() {
	open := make([]*track, 0, len(t.tracks))
	for _, tr := range t.tracks {
		if tr.activity != "" || tr.op != "" || tr.negotiating != "" {
			open = append(open, tr)
		}
	}
	slices.SortFunc(open, func(a, b *track) int { return a.pid - b.pid })
	const unfinished = `{"unfinished":true}`
	for _, tr := range open {
		if tr.activity != "" {
			t.eventLocked(tr.activity, 'E', tr.pid, tidExecute, "", unfinished)
			tr.activity = ""
		}
		if tr.op != "" {
			t.eventLocked(tr.op, 'E', tr.pid, tidExecute, "", unfinished)
			tr.op = ""
		}
		if tr.negotiating != "" {
			t.eventLocked(tr.negotiating, 'E', tr.pid, tidNegotiate, "", unfinished)
			tr.negotiating = ""
		}
	}
}

// signal wakes the writer goroutine without blocking.
func (t *Timeline) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// run is the writer goroutine. It sleeps until events are pending, lets a
// batch accumulate for up to interval (unless the batch is large, a Flush
// waits, or the timeline is closing), writes it outside the lock, and exits
// once Close has been called and everything is written.
func (t *Timeline) run() {
	defer close(t.done)
	timer := time.NewTimer(t.interval)
	timer.Stop()
	for {
		<-t.wake
		t.mu.Lock()
		urgent := t.closed || t.flushers > 0 || len(t.pending) >= t.threshold
		t.mu.Unlock()
		if !urgent {
			timer.Reset(t.interval)
			select {
			case <-timer.C:
			case <-t.wake:
			}
			timer.Stop()
		}
		if t.writeBatch() {
			return
		}
	}
}

// writeBatch writes what is pending and reports whether the timeline is
// closed and fully written.
func (t *Timeline) writeBatch() (finished bool) {
	t.mu.Lock()
	buf := t.pending
	t.pending, t.spare = t.spare[:0], nil
	failed := t.err != nil
	t.mu.Unlock()

	var err error
	if len(buf) > 0 && !failed {
		_, err = t.w.Write(buf)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil && t.err == nil {
		t.err = fmt.Errorf("hvd: timeline: writing %s: %w (the timeline stops here)", t.path, err)
	}
	t.written += int64(len(buf))
	if cap(buf) <= 4*t.threshold {
		t.spare = buf[:0]
	}
	t.cond.Broadcast()
	if len(t.pending) > 0 {
		t.signal()
		return false
	}
	return t.closed
}

// quote returns s as a JSON string literal.
func quote(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}
