//go:build !linux

package process

// Other systems have no /proc to read CPU times from.
const usageSupported = false

func groupUsage() map[int]usage { return nil }
