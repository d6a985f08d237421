package billing

import (
	"math"
	"reflect"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

func TestBudgetCrossings(t *testing.T) {
	b := &cloud.Budget{TenantID: "acme", Amount: usd("1000"), Thresholds: []int{100, 50, 80, 50}}
	for _, c := range []struct {
		spent money.Micros
		fired []int
		want  []int
	}{
		{usd("0"), nil, nil},
		{usd("499.999999"), nil, nil},
		{usd("500"), nil, []int{50}},
		{usd("850"), nil, []int{50, 80}},
		{usd("850"), []int{50}, []int{80}},
		{usd("1000"), []int{50, 80}, []int{100}},
		{usd("5000"), []int{50, 80, 100}, nil},
		{usd("5000"), []int{120}, []int{50, 80, 100}},
	} {
		if got := BudgetCrossings(b, c.spent, c.fired); !reflect.DeepEqual(got, c.want) {
			t.Errorf("spent %s, fired %v: %v, want %v", c.spent, c.fired, got, c.want)
		}
	}
	if got := BudgetCrossings(&cloud.Budget{Amount: 0, Thresholds: []int{0, 50}}, usd("10"), nil); got != nil {
		t.Errorf("zero budget: %v", got)
	}
	if got := BudgetCrossings(nil, usd("10"), nil); got != nil {
		t.Errorf("nil budget: %v", got)
	}
	// Exact at the extremes: no overflow in spent × 100.
	huge := &cloud.Budget{Amount: math.MaxInt64, Thresholds: []int{100, 1000}}
	if got := BudgetCrossings(huge, math.MaxInt64, nil); !reflect.DeepEqual(got, []int{100}) {
		t.Errorf("huge: %v", got)
	}
	// Exactly 33% reaches 33 and not 34.
	third := &cloud.Budget{Amount: 100, Thresholds: []int{33, 34}}
	if got := BudgetCrossings(third, 33, nil); !reflect.DeepEqual(got, []int{33}) {
		t.Errorf("third: %v", got)
	}
}
