package main

import (
	"strings"

	"github.com/hvdorg/hvd/sdk"
)

// The error path of the C ABI: errorOf turns an error of the sdk into the
// code (codegen/abi/hvd.go's table, which also names the Python exception
// each code becomes) and the message the caller shows. The library writes
// the final wording; the Python loader only maps the code to a class.

// classes maps the sdk's sentinels to codes. One error node that matches
// several (a sentinel that is also another through an Is method) takes the
// first row.
var classes = []struct {
	sentinel error
	code     int32
}{
	{errUnknownHandle, codeUnknownHandle},
	{sdk.ErrRemoved, codeRemoved},
	{sdk.ErrNotInitialized, codeNotInitialized},
	{sdk.ErrNotMember, codeNotMember},
	{sdk.ErrUnknownSet, codeUnknownSet},
	{sdk.ErrProcessSetMismatch, codeProcessSetMismatch},
	{sdk.ErrUnsupported, codeUnsupported},
	{sdk.ErrMismatch, codeMismatch},
	{sdk.ErrShutdown, codeShutdown},
	{sdk.ErrClosed, codeShutdown},
	{sdk.ErrPeerFailure, codePeerFailure},
	{sdk.ErrInvalidArgument, codeInvalidArgument},
	{sdk.ErrStalled, codeInternal}, // Horovod: the stalled job is shut down (HorovodInternalError)
}

// errorCode classifies err by the outermost sentinel it wraps: the error
// tree is walked in errors.Is's order (depth first, a node before what it
// wraps, wrapped errors left to right) and the first node that is a
// sentinel decides. So a peer failure that wraps the shutdown that broke
// it stays PEER_FAILURE. Errors that wrap no sentinel are INTERNAL.
func errorCode(err error) int32 {
	if code, ok := outermost(err, 0); ok {
		return code
	}
	return codeInternal
}

func outermost(err error, depth int) (int32, bool) {
	if err == nil || depth > 100 {
		return 0, false
	}
	for _, c := range classes {
		if is(err, c.sentinel) {
			return c.code, true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return outermost(u.Unwrap(), depth+1)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if code, ok := outermost(e, depth+1); ok {
				return code, true
			}
		}
	}
	return 0, false
}

// is reports whether the node err itself (not what it wraps) is target, as
// errors.Is decides for one node.
func is(err, target error) bool {
	if err == target {
		return true
	}
	x, ok := err.(interface{ Is(error) bool })
	return ok && x.Is(target)
}

// wording puts the sdk's sentinel texts that name the Go API in the words
// of a Python caller. It is keyed on the sentinels' own texts, so a
// sentinel's wording follows the sdk, and applies wherever such a text
// appears (an error may quote another by %v). The invalid-argument
// sentinel's words are dropped: the code (ValueError) says it.
var wording = strings.NewReplacer(
	sdk.ErrNotInitialized.Error(), notInitialized,
	strings.TrimPrefix(sdk.ErrNotInitialized.Error(), "hvd: "), notInitialized,
	strings.TrimPrefix(sdk.ErrShutdown.Error(), "hvd: "),
	"Horovod has been shut down (hvd.shutdown(), or a failure on some rank) before the op completed",
	strings.TrimPrefix(sdk.ErrInvalidArgument.Error(), "hvd: ")+": ", "",
)

const notInitialized = "Horovod has not been initialized: call hvd.init() first (or hvd.shutdown() was called)"

// errorOf is what the C caller gets for err: its code and its message.
func errorOf(err error) (int32, string) {
	return errorCode(err), wording.Replace(err.Error())
}
