// Package archtest holds the tests that keep docs/ARCHITECTURE.md true:
// its package table must name every package of the module and, for each,
// exactly the module packages it imports.
package archtest
