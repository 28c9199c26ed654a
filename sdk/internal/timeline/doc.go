// Package timeline writes Horovod's timeline: a Chrome trace-event JSON file
// (loadable in chrome://tracing, https://ui.perfetto.dev and other viewers of
// the Trace Event Format) that shows, per tensor, the negotiation phase and
// the execution phase of every collective. Only the coordinator (global rank
// 0) writes one; see HOROVOD_TIMELINE and HOROVOD_TIMELINE_MARK_CYCLES.
//
// # Model
//
// Every tensor name is a trace "process": it gets a pid (1, 2, … in order of
// first appearance; pid 0 is the timeline itself) and two "threads":
//
//   - tid 0, "negotiate": the NEGOTIATE_<OP> slice (e.g. NEGOTIATE_ALLREDUCE),
//     with one instant event per rank that reported the tensor ready, named
//     by the rank number ("0", "1", …) as in Horovod;
//   - tid 1, "execute": the top-level op slice (e.g. ALLREDUCE) and, nested one
//     level inside it, activities such as QUEUE, MEMCPY_IN_FUSION_BUFFER,
//     TCP_ALLREDUCE, MEMCPY_OUT_FUSION_BUFFER, WAIT_FOR_DATA,
//     WAIT_FOR_OTHER_TENSOR_DATA, INIT_FUSION_BUFFER. The end event of the op
//     carries args {"dtype": …, "shape": "[2, 3]"}.
//
// Using two threads (Horovod uses one) keeps every B/E pair properly nested
// even if the engine starts negotiating the next use of a name while the
// previous one still executes.
//
// # File format
//
// The file is a JSON array written incrementally, one event per line. The
// separator is written before each event rather than after it, so that after
// Close the file is strict JSON:
//
//	[
//	{"name":"process_name","ph":"M","pid":0,"args":{"name":"hvd timeline","start_time_since_epoch_in_micros":1750000000123456}},
//	{"name":"process_sort_index","ph":"M","pid":0,"args":{"sort_index":0}},
//	{"name":"process_name","ph":"M","pid":1,"args":{"name":"allreduce.grad.w"}},
//	{"name":"process_sort_index","ph":"M","pid":1,"args":{"sort_index":1}},
//	{"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"negotiate"}},
//	{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"execute"}},
//	{"name":"NEGOTIATE_ALLREDUCE","ph":"B","ts":12,"pid":1,"tid":0},
//	{"name":"0","ph":"i","ts":13,"pid":1,"tid":0,"s":"p"},
//	{"name":"NEGOTIATE_ALLREDUCE","ph":"E","ts":40,"pid":1,"tid":0},
//	{"name":"ALLREDUCE","ph":"B","ts":41,"pid":1,"tid":1},
//	{"name":"TCP_ALLREDUCE","ph":"B","ts":42,"pid":1,"tid":1},
//	{"name":"TCP_ALLREDUCE","ph":"E","ts":90,"pid":1,"tid":1},
//	{"name":"ALLREDUCE","ph":"E","ts":91,"pid":1,"tid":1,"args":{"dtype":"float32","shape":"[2, 3]"}},
//	{"name":"CYCLE_START","ph":"i","ts":95,"pid":0,"tid":0,"s":"g"}
//	]
//
// "ts" is in whole microseconds since Open (monotonic clock), and is
// non-decreasing in file order. The first event (pid 0's process_name) carries
// the wall-clock time of Open as microseconds since the Unix epoch in
// args.start_time_since_epoch_in_micros, the key Horovod uses, so ts values
// can be mapped to wall-clock time. Names are JSON-escaped with encoding/json
// (quotes, backslashes, control characters; invalid UTF-8 becomes U+FFFD).
// End events repeat the name of the slice they end (Horovod omits it; viewers
// ignore it).
//
// # Crashes
//
// Events are buffered in memory and written by a background goroutine at most
// flushInterval (250 ms) after they were recorded, so a crash loses at most
// that much. A file whose process died before Close lacks the closing "]"
// (and its last line may be cut in the middle of an event). The Trace Event
// Format makes the closing "]" optional precisely so that traces can be
// written incrementally, and chrome://tracing and Perfetto load such files;
// strict JSON parsers do not, so use ParseFile, which accepts them.
package timeline
