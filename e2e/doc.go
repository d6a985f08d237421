// Package e2e holds gpucloud's end-to-end tests: a real server process (in
// this process, over loopback HTTP, on SQLite and on PostgreSQL), simulated
// GPU hosts joined through real agents that run real workloads with the
// process runtime, and a tenant driving it all through the public API as a
// new user would. It has no code of its own; everything is in its tests.
package e2e
