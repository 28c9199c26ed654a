package launch

import (
	"errors"
	"fmt"
)

var (
	// ErrUsage marks a malformed command line (unknown flag, missing value,
	// no command). hvdrun prints the message and the usage and exits 2.
	ErrUsage = errors.New("hvdrun: usage error")
	// ErrConfig marks a well-formed command line that describes an impossible
	// job (bad hostfile, fewer slots than ranks, unknown interface). hvdrun
	// prints the message and exits 2.
	ErrConfig = errors.New("hvdrun: configuration error")
	// ErrHelp is returned by ParseArgs for -h/--help; hvdrun prints the usage
	// on stdout and exits 0.
	ErrHelp = errors.New("hvdrun: help requested")
	// ErrVersion is returned by ParseArgs for -v/--version; hvdrun prints
	// the version on stdout and exits 0, as horovodrun does.
	ErrVersion = errors.New("hvdrun: version requested")
)

// usageErrorf returns an error that wraps ErrUsage with a message that names
// the offending argument.
func usageErrorf(format string, args ...any) error {
	return &wrapped{msg: "hvdrun: " + fmt.Sprintf(format, args...), kind: ErrUsage}
}

// configErrorf returns an error that wraps ErrConfig.
func configErrorf(format string, args ...any) error {
	return &wrapped{msg: "hvdrun: " + fmt.Sprintf(format, args...), kind: ErrConfig}
}

type wrapped struct {
	msg  string
	kind error
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.kind }

// ExitError reports that the job ran and ended badly: a rank failed to start,
// exited non-zero or was killed by a signal. Code is the status hvdrun exits
// with (the first failing rank's exit code, 128+signal for signals, 127 when
// the command was not found). Reported is true when the one-line failure
// message has already been written to the job's stderr, so callers should not
// print Error() again.
type ExitError struct {
	Code     int
	Rank     int    // first failing rank, -1 if the failure is not tied to a rank
	Host     string // host of Rank
	Reason   string // e.g. "exited with status 3", "killed by signal 9"
	Reported bool
}

func (e *ExitError) Error() string {
	if e.Rank < 0 {
		return fmt.Sprintf("hvdrun: %s", e.Reason)
	}
	return fmt.Sprintf("hvdrun: rank %d (%s) %s", e.Rank, e.Host, e.Reason)
}

// ExitCode maps an error from ParseArgs, NewJob or (*Job).Run to hvdrun's
// exit status: nil → 0, ErrHelp and ErrVersion → 0, ErrUsage and ErrConfig → 2, *ExitError →
// its Code, anything else → 1.
func ExitCode(err error) int {
	var ee *ExitError
	switch {
	case err == nil, errors.Is(err, ErrHelp), errors.Is(err, ErrVersion):
		return 0
	case errors.Is(err, ErrUsage), errors.Is(err, ErrConfig):
		return 2
	case errors.As(err, &ee):
		return ee.Code
	default:
		return 1
	}
}
