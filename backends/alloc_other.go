//go:build !linux

package backends

func adviseHuge([]byte) {}
