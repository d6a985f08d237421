//go:build !linux

package process

// Other systems have no /proc to read CPU times from.
const usageSupported = false

func groupCPUSeconds() map[int]float64 { return nil }
