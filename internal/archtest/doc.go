// Package archtest holds the tests that keep the architecture true:
// docs/ARCHITECTURE.md's package table names every package of the module
// and, for each, exactly the module packages it imports; and no production
// code outside package service writes an instance's state.
package archtest
