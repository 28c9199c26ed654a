package backends

// StatusReducer is a control plane that can combine the members' status
// vectors along a tree (recursive doubling: ⌈log2 n⌉ messages per member)
// instead of sending each to every member (AllgatherStatus: n−1). The
// engine uses it on large sets when the plane offers it; what it needs of
// the vectors is only their combination (engine.CombineStatus).
type StatusReducer interface {
	// ReduceStatus is collective: every member contributes send (the same
	// length on every member) and returns the combination of all of them.
	// combine(lo, hi) folds the combination of a group of members into
	// that of a group of higher-ranked members and returns a new slice of
	// the same length; every fold puts the lower group first, so the group
	// holding rank 0 always comes first. Like AllgatherStatus, it wakes a
	// member blocked in Idle.
	ReduceStatus(send []byte, combine func(lo, hi []byte) []byte) ([]byte, error)
}
