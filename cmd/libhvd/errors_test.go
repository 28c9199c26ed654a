package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk"
)

// Every code of the spec comes out of errorOf for an error of its class,
// wrapped as the sdk wraps them, with the caller's wording.
func TestErrorOfEachCode(t *testing.T) {
	wrap := func(e error) error { return fmt.Errorf("hvd: allreduce on process set 1: %w", e) }
	for _, c := range []struct {
		err  error
		code int32
		msg  string
	}{
		{fmt.Errorf("%w: allreduce: name x already in flight", sdk.ErrInvalidArgument), codeInvalidArgument,
			"hvd: allreduce: name x already in flight"},
		{fmt.Errorf("%w (rank of a nil process set)", sdk.ErrNotInitialized), codeNotInitialized,
			"Horovod has not been initialized: call hvd.init() first (or hvd.shutdown() was called) (rank of a nil process set)"},
		{wrap(sdk.ErrNotMember), codeNotMember, "hvd: allreduce on process set 1: hvd: not a member of the process set"},
		{wrap(sdk.ErrUnknownSet), codeUnknownSet, ""},
		{wrap(sdk.ErrSetUnregistered), codeUnknownSet, ""},
		{wrap(sdk.ErrProcessSetMismatch), codeProcessSetMismatch, ""},
		{fmt.Errorf("%w %d (never issued, or already released)", errUnknownHandle, 7), codeUnknownHandle,
			"hvd: unknown handle 7 (never issued, or already released)"},
		{wrap(sdk.ErrUnsupported), codeUnsupported, ""},
		{wrap(sdk.ErrMismatch), codeMismatch, ""},
		{wrap(sdk.ErrShutdown), codeShutdown,
			"hvd: allreduce on process set 1: hvd: Horovod has been shut down (hvd.shutdown(), or a failure on some rank) before the op completed"},
		{fmt.Errorf("hvd: tcp: %w", sdk.ErrClosed), codeShutdown, "hvd: tcp: hvd: communicator closed"},
		{wrap(&backends.PeerError{Peer: 1, Global: -1, Op: "allreduce", Err: errors.New("EOF")}), codePeerFailure,
			"hvd: allreduce on process set 1: hvd: allreduce: rank 1: EOF"},
		{fmt.Errorf("%w: process set 0: tensors waited", sdk.ErrStalled), codeInternal, ""},
		{fmt.Errorf("hvd: internal error in allreduce: %v", "boom"), codeInternal, "hvd: internal error in allreduce: boom"},
		{fmt.Errorf("%w: worker w is not part of the world", sdk.ErrRemoved), codeRemoved, ""},
	} {
		code, msg := errorOf(c.err)
		if code != c.code {
			t.Errorf("errorOf(%q) code %d, want %d", c.err, code, c.code)
		}
		if c.msg != "" && msg != c.msg {
			t.Errorf("errorOf(%q) message\n%q, want\n%q", c.err, msg, c.msg)
		}
	}
	seen := map[int32]bool{}
	for _, c := range classes {
		seen[c.code] = true
	}
	for code := int32(codeInvalidArgument); code <= codeRemoved; code++ {
		if !seen[code] && code != codeInternal {
			t.Errorf("code %d has no sentinel", code)
		}
	}
}

// A sentinel wrapped inside an error of another class keeps the outer
// class: the first sentinel in errors.Is's walk decides, not a fixed
// priority among all the sentinels the tree holds.
func TestOuterSentinelDecides(t *testing.T) {
	shut := fmt.Errorf("hvd: allreduce: %w", sdk.ErrShutdown)
	for _, c := range []struct {
		err  error
		code int32
	}{
		// a peer failure caused by a shutdown elsewhere (PeerError puts
		// ErrPeerFailure before its cause)
		{&backends.PeerError{Peer: 2, Global: -1, Err: shut}, codePeerFailure},
		{fmt.Errorf("%w: allreduce after an earlier failure: %w", sdk.ErrPeerFailure, shut), codePeerFailure},
		// the other way round
		{fmt.Errorf("%w: %w", sdk.ErrShutdown, &backends.PeerError{Peer: 2, Global: -1, Err: errors.New("EOF")}), codeShutdown},
		// an invalid argument that quotes an unsupported one
		{fmt.Errorf("%w: because %w", sdk.ErrInvalidArgument, sdk.ErrUnsupported), codeInvalidArgument},
		{errors.Join(errors.New("no class"), fmt.Errorf("x: %w", sdk.ErrMismatch), sdk.ErrShutdown), codeMismatch},
	} {
		if got := errorCode(c.err); got != c.code {
			t.Errorf("errorCode(%q) = %d, want %d", c.err, got, c.code)
		}
	}
	// The wording follows the text, whatever the code: a peer failure
	// quoting the shutdown text says it in the caller's words too.
	code, msg := errorOf(fmt.Errorf("%w: rank 2 stopped: %v", sdk.ErrPeerFailure, shut))
	if code != codePeerFailure || strings.Contains(msg, "engine has been shut down") ||
		!strings.Contains(msg, "Horovod has been shut down (hvd.shutdown(), or a failure on some rank)") {
		t.Errorf("peer failure quoting a shutdown: code %d, %q", code, msg)
	}
}

// No message the caller reads names the Go API: every sentinel, wrapped or
// bare, comes out without Init/Shutdown/"the SDK" or the invalid-argument
// words (but the bare invalid-argument sentinel, which has nothing else to
// say) (the wording table matches the sentinels' exact texts, so an sdk
// rewording that breaks it fails here).
func TestNoGoWordsInMessages(t *testing.T) {
	for _, c := range classes {
		for _, err := range []error{c.sentinel, fmt.Errorf("hvd: op: %w: detail", c.sentinel)} {
			_, msg := errorOf(err)
			for _, w := range []string{"Init", "Shutdown", "the SDK", "invalid argument", "engine has been shut down"} {
				if strings.Contains(msg, w) && !(err == sdk.ErrInvalidArgument && w == "invalid argument") {
					t.Errorf("message %q names %q", msg, w)
				}
			}
		}
	}
}

// A bad launch environment (what sdk.Start returns for HOROVOD_SIZE=x) is
// the user's error: INVALID_ARGUMENT, through the rendezvous error's Is
// method, with its own words.
func TestBadLaunchEnvironmentIsInvalidArgument(t *testing.T) {
	env := map[string]string{"HOROVOD_RANK": "1", "HOROVOD_SIZE": "x"}
	_, err := sdk.Start(context.Background(), sdk.Config{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err == nil {
		t.Fatal("Start with HOROVOD_SIZE=x succeeded")
	}
	code, msg := errorOf(err)
	if code != codeInvalidArgument || !strings.HasPrefix(msg, "hvd: rendezvous: bad launch environment: ") {
		t.Fatalf("errorOf(%q) = %d, %q; want INVALID_ARGUMENT and the rendezvous wording", err, code, msg)
	}
}
