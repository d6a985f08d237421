// Package autoscale decides how many instances a group should hold. It has
// two halves, which share the seasonal forecaster (forecast.go) and are
// otherwise apart; their files are named by half.
//
// The group half (group*.go) is what a live instance group runs: the group
// controller (controller/groups.go) calls PlanGroup once per step with a
// snapshot of the group, its members, its pools' prices and its metrics
// History, and carries out the Plan. Its policies are the ones a group's
// spec names (cloud.ScalingPolicy): target tracking and step scaling on a
// metric, predictive scaling from the History, and scheduled actions,
// which are cron expressions (Cron) that set min, max or desired. The half
// also spreads the desired capacity over on-demand and spot pools
// (group_mixed.go), validates group specs (ValidateGroup) and backtests a
// group's forecast (BacktestForecast).
//
// The demand half (demand*.go) is what `gpucloud sim autoscale` scores:
// Replay runs one Policy over a demand Series (read from CSV, or made by
// Synthetic) and accounts its cost and its shortfall; Oracle is the
// capacity that knows the future. Its policies (New, Policies) read only the demand seen
// so far: target and step on demand, predictive and the default gpucloud
// policy on the forecast, and "scheduled", an hour-of-week capacity
// (WeekSchedule), given or learned from the history, not a cron action.
//
// Both halves are pure: they read their input and return a decision or a
// plan, with no I/O, no clock and no global randomness.
package autoscale
