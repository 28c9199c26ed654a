package sdk

import "github.com/hvdorg/hvd/sdk/internal/wiring"

// The store helpers moved to sdk/internal/wiring; the sdk's tests of them
// (knobs_test.go, storewait_test.go) call them by their old names.
var (
	storeBindHost = wiring.StoreBindHost
	waitForStore  = wiring.WaitForStore
)
