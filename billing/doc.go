// Package billing rates the usage ledger into invoices. Everything here is
// a pure function over snapshots (prices, spot history, usage entries,
// commitments) except Load, the one adapter that reads such a snapshot
// from a store transaction; nothing reads the clock.
//
// Rating works in whole seconds. A usage interval bills the seconds
// [floor(start), floor(end)) inside the period, up to the invoice's as-of
// time; each second is priced at the price in force at its first instant
// (a price that takes effect at 12:00:00.5 applies from 12:00:01). Lines
// group seconds by category, model, offering, zone, commitment and unit
// price, and each line's amount is rounded once with money.MulDiv.
package billing
