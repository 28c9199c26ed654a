package sdk

import "github.com/hvdorg/hvd/sdk/internal/engine"

// callerIdleLimitForTest is how long a driving caller sleeps in a shared
// Idle before it leaves the round to the engine goroutine.
const callerIdleLimitForTest = engine.CallerIdleLimit
