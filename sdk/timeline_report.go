package sdk

import (
	"fmt"
	"io"

	"github.com/hvdorg/hvd/sdk/internal/timeline"
)

// TimelineSummary is what WriteTimelineReport found.
type TimelineSummary struct {
	Ops, Tensors, Steps int
}

// WriteTimelineReport reads the timeline file at path (HOROVOD_TIMELINE,
// hvdrun --timeline-filename; one a dead job left behind too) and writes
// its report to w as one self-contained HTML page titled title: per
// tensor, the time split into queue, wait for the other ranks, negotiation
// and execution; the straggler rank of every step; fusion efficiency; the
// longest waits (docs/observability.md). A file with no completed op is an
// error.
func WriteTimelineReport(w io.Writer, path, title string) (TimelineSummary, error) {
	evs, err := timeline.ParseFile(path)
	if err != nil {
		return TimelineSummary{}, err
	}
	r := timeline.Summarize(evs)
	if r.Ops == 0 {
		return TimelineSummary{}, fmt.Errorf("hvd: timeline: %s holds no completed op (%d events): was the job's HOROVOD_TIMELINE written by rank 0 of a job that ran collectives?", path, len(evs))
	}
	return TimelineSummary{Ops: r.Ops, Tensors: len(r.Tensors), Steps: len(r.Steps)}, r.WriteHTML(w, title)
}
