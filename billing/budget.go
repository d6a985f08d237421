package billing

import (
	"math/bits"
	"sort"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// BudgetCrossings returns the thresholds of b (percent of its Amount) that
// spent has reached and that are not in fired, ascending and without
// repeats. A budget of zero has none; a threshold is reached when
// spent ≥ Amount × threshold / 100, compared exactly.
func BudgetCrossings(b *cloud.Budget, spent money.Micros, fired []int) []int {
	if b == nil || b.Amount <= 0 || spent < 0 {
		return nil
	}
	done := make(map[int]bool, len(fired))
	for _, f := range fired {
		done[f] = true
	}
	var out []int
	for _, t := range b.Thresholds {
		if t < 0 || done[t] {
			continue
		}
		done[t] = true
		// spent*100 >= amount*t in 128 bits.
		sh, sl := bits.Mul64(uint64(spent), 100)
		ah, al := bits.Mul64(uint64(b.Amount), uint64(t))
		if sh > ah || sh == ah && sl >= al {
			out = append(out, t)
		}
	}
	sort.Ints(out)
	return out
}
