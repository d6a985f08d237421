// Package autoscale decides how many instances a group should hold. One
// planner does it, for a live group and for the demand replay alike.
//
// The group half (group*.go) is the planner: the group controller
// (controller/groups.go) calls PlanGroup once per round with a snapshot
// of the group, its members, its pools' prices and its metrics History,
// and carries out the Plan. Its policies are the ones a group's spec
// names (cloud.ScalingPolicy): target tracking and step scaling on a
// metric, predictive scaling and the gpucloud policy from the History
// (group_gpucloud.go: a forecast with its own error margin and a
// reactive floor, the default), and scheduled actions, which are cron
// expressions (Cron) that set min, max or desired. The half also spreads
// the desired capacity over on-demand and spot pools (group_mixed.go),
// validates group specs (ValidateGroup) and backtests a group's forecast
// (BacktestForecast).
//
// The demand half (demand*.go) is what `gpucloud sim autoscale` scores:
// Replay runs a group (ReplayGroup) with a named policy list (PolicySpec)
// or any given one over a demand Series (read from CSV, or made by
// Synthetic), through PlanGroup over simulated time: each step it
// publishes the demand of the step before as the custom metric
// DemandMetric, asks the planner, boots its launches and gives its
// releases their notice, and accounts the capacity paid and the demand
// unmet. Oracle is the capacity that knows the future.
//
// Both halves are pure: they read their input and return a decision or a
// plan, with no I/O, no clock and no global randomness.
package autoscale
